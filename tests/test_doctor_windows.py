"""doctor's model of Windows' DLL search, on described Windows machines.

Each machine is what ``set``, ``dir /b`` of the folders on the search path and the environment's
``conda-meta`` show: a TF 1.14 workstation set up after TensorFlow's old Windows guide (cuDNN
unpacked into ``C:\\tools\\cuda\\bin``, CUDA 10.0 from NVIDIA's installer with its
``CUDA_PATH_V10_0``), the layouts users report in tensorflow/tensorflow#22794 and #36111
(a ``cudnn64_7.dll`` in ``C:\\tools\\cuda\\bin`` or System32). The same machine is checked
with a Python 3.7 and a Python 3.9 environment: Windows' rules differ between them. The last
tests read machines recorded in public issues (tests/data/probes/win10-*, see SOURCES.md there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from test_doctor import RecordedProbes

from envfactory.catalog.loader import load_catalog
from envfactory.diagnose.dllsearch import (
    WindowsProcess,
    loader_for,
    locate_dll,
    search_order,
)
from envfactory.diagnose.doctor import diagnose
from envfactory.diagnose.nvml import MachineGpus, parse_smi_query
from envfactory.diagnose.probes import MappingFs, MeasuredLoad, PrefixPackages, TfCheck

PREFIX = "C:\\Users\\张三\\miniconda3\\envs\\tf114"
LIB = PREFIX + "\\Library\\bin"
TOOLS = "C:\\tools\\cuda\\bin"
CUDA10 = "C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v10.0\\bin"
SYS32 = "C:\\Windows\\System32"
HOME = "C:\\Users\\张三"

ENV_DLLS = ["cudart64_100.dll", "cublas64_100.dll", "cudnn64_7.dll"]


def machine_tree(**extra: Sequence[str]) -> dict[str, list[str]]:
    tree: dict[str, list[str]] = {
        SYS32: ["kernel32.dll", "msvcp140.dll", "msvcp140_1.dll", "nvcuda.dll"],
        LIB: list(ENV_DLLS),
        PREFIX: ["python.exe", "python37.dll", "msvcp140.dll", "vcruntime140.dll"],
        TOOLS: ["cudnn64_7.dll"],
        CUDA10: ["cudart64_100.dll", "cublas64_100.dll", "nvcc.exe"],
    }
    for folder, names in extra.items():
        tree.setdefault(folder.replace("/", "\\"), []).extend(names)
    return tree


def machine_env(path: Sequence[str], **more: str) -> dict[str, str]:
    return {
        "PATH": ";".join(path),
        "SystemRoot": "C:\\Windows",
        "CUDA_PATH": CUDA10.removesuffix("\\bin"),
        "CUDA_PATH_V10_0": CUDA10.removesuffix("\\bin"),
        **more,
    }


def probes(
    tree: Mapping[str, Sequence[str]],
    environ: Mapping[str, str],
    python: str,
    measured: Mapping[str, MeasuredLoad] | None = None,
) -> RecordedProbes:
    packages = PrefixPackages({"python": python}, {"python": "h0"}, {"python": "defaults"}, {})
    return RecordedProbes(
        "windows",
        environ,
        MappingFs(tree, "windows"),
        packages=packages,
        cwd=HOME,
        measured=measured,
        tf=TfCheck(PREFIX + "\\python.exe", None, None, None, None, {"run": "not run"}, ""),
    )


def gtx1080() -> MachineGpus:
    return MachineGpus(
        "nvml",
        "411.31",
        10000,
        parse_smi_query("0, GeForce GTX 1080, 6.1, 8192, GPU-x, 411.31").gpus,
    )


def run_doctor(p: RecordedProbes) -> dict[str, dict[str, object]]:
    catalog = load_catalog()
    report = diagnose(catalog, catalog.combo("tf114-cuda100"), "win-64", gtx1080(), p, Path(PREFIX))
    data = report.to_json()
    assert data["windows"] is not None
    return {d["dll"]: d for d in data["windows"]["dlls"]}


# The workstation: activated environment, but the user's PATH keeps TF's old guide's folders
# ahead of it (PATH set in the system settings comes first; conda prepends to what it finds,
# so an earlier setx of these folders into the user PATH at the front is the case reported).
PATH_TOOLS_FIRST = [TOOLS, CUDA10, LIB, SYS32]


def test_cudnn_loads_from_path_for_python37_but_from_the_environment_for_python39() -> None:
    tree = machine_tree()
    env = machine_env(PATH_TOOLS_FIRST)
    py37 = run_doctor(probes(tree, env, "3.7.16"))
    py39 = run_doctor(probes(tree, env, "3.9.18"))
    cudnn37, cudnn39 = py37["cudnn64_7.dll"], py39["cudnn64_7.dll"]
    # Python 3.7: ctypes.WinDLL (TF 1.14's self-check) searches PATH; the first PATH entry wins
    assert cudnn37["loads"] == {"path": f"{TOOLS}\\cudnn64_7.dll", "origin": "PATH"}
    assert "first PATH entry" in str(cudnn37["why"])
    # Python 3.9 (conda's build): PATH is not searched; conda's python added Library\bin
    assert cudnn39["loads"] == {"path": f"{LIB}\\cudnn64_7.dll", "origin": "add_dll_directory"}
    assert "PATH and the current directory are not searched" in str(cudnn39["rule"])
    # `where` answers the same for both: it knows nothing of the loader
    assert (
        cudnn37["where"] == cudnn39["where"] == [f"{TOOLS}\\cudnn64_7.dll", f"{LIB}\\cudnn64_7.dll"]
    )


def test_a_system32_copy_wins_for_python37_and_loses_for_python39() -> None:
    tree = machine_tree(**{SYS32: ["cudnn64_7.dll"]})
    env = machine_env([LIB, SYS32])  # activated, nothing foreign on PATH
    py37 = run_doctor(probes(tree, env, "3.7.16"))["cudnn64_7.dll"]
    py39 = run_doctor(probes(tree, env, "3.9.18"))["cudnn64_7.dll"]
    assert py37["loads"] == {"path": f"{SYS32}\\cudnn64_7.dll", "origin": "system"}
    assert py39["loads"] == {"path": f"{LIB}\\cudnn64_7.dll", "origin": "add_dll_directory"}
    # System32 is still behind it for 3.9
    assert {"path": f"{SYS32}\\cudnn64_7.dll", "origin": "system"} in py39["shadowed"]  # type: ignore[operator]


def test_conda_dll_search_modification_makes_path_copies_unordered_until_311() -> None:
    tree = machine_tree()
    env = machine_env(PATH_TOOLS_FIRST, CONDA_DLL_SEARCH_MODIFICATION_ENABLE="1")
    py39 = run_doctor(probes(tree, env, "3.9.18"))["cudnn64_7.dll"]
    assert py39["unordered"] == [f"{TOOLS}\\cudnn64_7.dll"]
    assert "does not specify their order" in str(py39["why"])
    py311 = run_doctor(probes(tree, env, "3.11.9"))["cudnn64_7.dll"]  # removed in 3.11
    assert py311["unordered"] == [] and py311["loads"] == {
        "path": f"{LIB}\\cudnn64_7.dll",
        "origin": "add_dll_directory",
    }


def test_cublas_is_a_dependency_of_the_extension_module_in_tf114() -> None:
    tree = machine_tree()
    env = machine_env(PATH_TOOLS_FIRST)
    py37 = run_doctor(probes(tree, env, "3.7.16"))
    assert py37["cublas64_100.dll"]["loader"] == "extension"
    assert py37["cublas64_100.dll"]["loads"] == {
        "path": f"{CUDA10}\\cublas64_100.dll",
        "origin": "PATH",
    }
    assert py37["cudart64_100.dll"]["loader"] == "ctypes"


def test_vc_runtime_is_reported_and_a_missing_one_is_a_problem() -> None:
    tree = machine_tree()
    env = machine_env([LIB, SYS32])
    dlls = run_doctor(probes(tree, env, "3.7.16"))
    # the conda env's own msvcp140.dll (vs2015_runtime, in python.exe's folder) comes first
    assert dlls["msvcp140.dll"]["loads"] == {
        "path": f"{PREFIX}\\msvcp140.dll",
        "origin": "application",
    }
    assert dlls["msvcp140_1.dll"]["loads"] == {
        "path": f"{SYS32}\\msvcp140_1.dll",
        "origin": "system",
    }
    bare = {k: [n for n in v if not n.startswith("msvcp140")] for k, v in machine_tree().items()}
    catalog = load_catalog()
    p = probes(bare, env, "3.7.16")
    report = diagnose(catalog, catalog.combo("tf114-cuda100"), "win-64", gtx1080(), p, Path(PREFIX))
    missing = [f for f in report.findings if f.id == "vc-runtime-missing"]
    assert [f.severity for f in missing] == ["problem", "problem"]
    assert "redistributable" in (missing[0].fix or "")


def test_cuda_path_variables_cwd_and_module_dir_are_reported() -> None:
    catalog = load_catalog()
    p = probes(machine_tree(), machine_env(PATH_TOOLS_FIRST), "3.7.16")
    report = diagnose(catalog, catalog.combo("tf114-cuda100"), "win-64", gtx1080(), p, Path(PREFIX))
    w = report.to_json()["windows"]
    assert w["cuda_path"] == {
        "CUDA_PATH": CUDA10.removesuffix("\\bin"),
        "CUDA_PATH_V10_0": CUDA10.removesuffix("\\bin"),
    }
    assert w["cwd"] == HOME and w["python"] == "3.7"
    assert w["module_dir"] == PREFIX + "\\Lib\\site-packages\\tensorflow\\python"
    ids = {f.id for f in report.findings}
    assert "where-several" in ids and "cuda-path-variables" in ids


def test_a_copy_in_the_current_directory_beats_path_for_the_standard_order_only() -> None:
    tree = machine_tree(**{HOME: ["cudnn64_7.dll"]})
    env = machine_env(PATH_TOOLS_FIRST)
    assert run_doctor(probes(tree, env, "3.7.16"))["cudnn64_7.dll"]["loads"] == {
        "path": f"{HOME}\\cudnn64_7.dll",
        "origin": "cwd",
    }
    assert run_doctor(probes(tree, env, "3.9.18"))["cudnn64_7.dll"]["loads"] == {
        "path": f"{LIB}\\cudnn64_7.dll",
        "origin": "add_dll_directory",
    }


def test_known_dlls_always_come_from_system32() -> None:
    proc = WindowsProcess(
        (3, 9), True, PREFIX, HOME, machine_env([LIB]), frozenset({"msvcp140.dll"})
    )
    tree = machine_tree()
    got = locate_dll("msvcp140.dll", "ctypes", proc, MappingFs(tree, "windows"))
    assert got.loads is not None and got.loads.origin == "KnownDLLs"
    assert got.loads.path == f"{SYS32}\\msvcp140.dll"


def test_tf2_loads_cuda_itself_with_the_standard_order_on_any_python() -> None:
    assert loader_for("cudnn64_8.dll", "2.5.0") == "tensorflow"
    assert loader_for("cudnn64_7.dll", "1.14.0") == "ctypes"
    assert loader_for("msvcp140_1.dll", "2.5.0") == "ctypes"
    proc = WindowsProcess((3, 9), True, PREFIX, HOME, machine_env(PATH_TOOLS_FIRST))
    steps, rule = search_order(proc, "tensorflow")
    assert [s.origin for s in steps][:5] == ["application", "system", "system", "windows", "cwd"]
    assert [s.path for s in steps if s.origin == "PATH"] == PATH_TOOLS_FIRST
    assert "whatever the Python version" in rule


def test_measured_load_is_shown_next_to_the_prediction() -> None:
    tree = machine_tree()
    env = machine_env(PATH_TOOLS_FIRST)
    measured = {
        "cudnn64_7.dll": MeasuredLoad(f"{TOOLS}\\cudnn64_7.dll", "ctypes.WinDLL(name), Python 3.7"),
        "cudart64_100.dll": MeasuredLoad(
            f"{LIB}\\cudart64_100.dll", "ctypes.WinDLL(name), Python 3.7"
        ),
    }
    catalog = load_catalog()
    p = probes(tree, env, "3.7.16", measured)
    report = diagnose(catalog, catalog.combo("tf114-cuda100"), "win-64", gtx1080(), p, Path(PREFIX))
    by_id: dict[str, list[str]] = {}
    for f in report.findings:
        by_id.setdefault(f.id, []).append(f.message)
    assert any("cudnn64_7.dll from C:\\tools" in m for m in by_id["measured-load"])
    # cudart: the model says CUDA 10.0's folder (first on PATH); the measurement disagrees
    assert any(
        "cudart64_100.dll" in m and f"predicted: {CUDA10}\\cudart64_100.dll" in m
        for m in by_id["measured-load-differs"]
    )
    assert report.to_json()["measured"]["cudnn64_7.dll"]["path"] == f"{TOOLS}\\cudnn64_7.dll"


def test_the_measurement_reports_the_file_the_loader_really_mapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measuring script, run by a real Python here (Linux: dl_iterate_phdr): a copy of
    libz in a folder on LD_LIBRARY_PATH is the one reported, and a missing library is named."""
    import shutil
    import sys

    from envfactory.diagnose.probes import measure_loads

    system = next(
        p for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/libz.so.1") if Path(p).exists()
    )
    folder = tmp_path / "stray lib"
    folder.mkdir()
    shutil.copy(system, folder / "libz.so.1")
    requests = [("libz.so.1", "ctypes"), ("libcudnn.so.7", "ctypes")]
    plain = measure_loads(Path(sys.prefix), "linux", requests)
    assert (
        plain["libz.so.1"].path is not None
        and Path(plain["libz.so.1"].path).resolve() == Path(system).resolve()
    )
    assert plain["libcudnn.so.7"].path is None and "libcudnn.so.7" in (
        plain["libcudnn.so.7"].error or ""
    )
    monkeypatch.setenv("LD_LIBRARY_PATH", str(folder))
    shadowed = measure_loads(Path(sys.prefix), "linux", requests)
    assert shadowed["libz.so.1"].path == str(folder / "libz.so.1")


# --------------------------------------------------------------------------------------------
# Recorded machines: what users pasted in public issue threads (tests/data/probes/win10-*/,
# each folder's README.md names the comment and marks every normalisation). The environment
# (a conda prefix of the tf114-cuda100 win-64 lock) is ours, added to the recorded machine.

RECORDED = Path(__file__).parent / "data" / "probes"
ENV_TREE = {
    PREFIX: ["python.exe", "msvcp140.dll", "vcruntime140.dll"],
    LIB: list(ENV_DLLS),
}


def recorded_machine(name: str) -> tuple[dict[str, str], list[str]]:
    """The folder's env-vars.txt (NAME=value lines) and dll-files.txt (full paths)."""
    folder = RECORDED / name
    environ = dict(
        line.split("=", 1)
        for line in (folder / "env-vars.txt").read_text(encoding="utf-8").splitlines()
        if "=" in line
    )
    files = (folder / "dll-files.txt").read_text(encoding="utf-8").splitlines()
    return environ, [f for f in files if f.strip()]


def with_environment(files: Sequence[str]) -> dict[str, list[str]]:
    """The recorded machine's files plus the environment's, as one directory tree."""
    tree: dict[str, list[str]] = {k: list(v) for k, v in ENV_TREE.items()}
    for path in files:
        folder, _, name = path.rpartition("\\")
        tree.setdefault(folder, []).append(name)
    return tree


def test_recorded_tf31143_unactivated_python37_finds_no_cudnn_and_python39_its_own() -> None:
    """tensorflow/tensorflow#31143: CUDA 10.0 on the system PATH, no cuDNN; the user ran TF 1.14
    from a notebook. The environment's python.exe started without activation (a notebook or IDE
    kernel) sees the machine's PATH: Python 3.7 (ctypes, standard order) finds no cudnn64_7.dll
    and CUDA 10.0's cudart; conda's Python 3.9 finds both in the environment's Library\\bin."""
    environ, files = recorded_machine("win10-tf31143-cuda100")
    tree = with_environment(files)
    py37 = run_doctor(probes(tree, environ, "3.7.16"))
    py39 = run_doctor(probes(tree, environ, "3.9.18"))
    assert py37["cudnn64_7.dll"]["loads"] is None
    assert py39["cudnn64_7.dll"]["loads"] == {
        "path": f"{LIB}\\cudnn64_7.dll",
        "origin": "add_dll_directory",
    }
    cuda10 = "C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v10.0\\bin"
    assert py37["cudart64_100.dll"]["loads"] == {
        "path": f"{cuda10}\\cudart64_100.dll",
        "origin": "PATH",
    }
    assert py39["cudart64_100.dll"]["loads"] == {
        "path": f"{LIB}\\cudart64_100.dll",
        "origin": "add_dll_directory",
    }
    # doctor's `where` answer is the one the user pasted
    verbatim = (RECORDED / "win10-tf31143-cuda100" / "verbatim.txt").read_text(encoding="utf-8")
    command, *output = verbatim.splitlines()
    assert command == "where cudart64_100.dll"
    assert py37["cudart64_100.dll"]["where"] == py39["cudart64_100.dll"]["where"] == output


def test_recorded_tf40804_system32_copy_wins_for_python37_and_loses_for_python39() -> None:
    """tensorflow/tensorflow#40804: cudnn64_7.dll and CUDA 10.1 DLLs copied into System32. In
    the activated environment (its Library\\bin first on PATH) Python 3.7 still loads System32's
    cudnn64_7.dll (System32 comes before PATH); conda's Python 3.9 loads the environment's."""
    environ, files = recorded_machine("win10-tf40804-system32")
    verbatim = (RECORDED / "win10-tf40804-system32" / "verbatim.txt").read_text(encoding="utf-8")
    assert sorted(f.rpartition("\\")[2] for f in files) == sorted(
        line.removeprefix("- ") for line in verbatim.splitlines()
    )
    tree = with_environment(files)
    activated = {**environ, "PATH": ";".join([PREFIX, LIB, PREFIX + "\\Scripts", SYS32])}
    py37 = run_doctor(probes(tree, activated, "3.7.16"))
    py39 = run_doctor(probes(tree, activated, "3.9.18"))
    assert py37["cudnn64_7.dll"]["loads"] == {"path": f"{SYS32}\\cudnn64_7.dll", "origin": "system"}
    assert py39["cudnn64_7.dll"]["loads"] == {
        "path": f"{LIB}\\cudnn64_7.dll",
        "origin": "add_dll_directory",
    }
    # the copied runtime is CUDA 10.1's (cudart64_101): TF 1.14 asks for cudart64_100, which only
    # the environment holds, so both Pythons load that one from it
    assert py37["cudart64_100.dll"]["loads"] == {
        "path": f"{LIB}\\cudart64_100.dll",
        "origin": "PATH",
    }
    assert py39["cudart64_100.dll"]["loads"] == {
        "path": f"{LIB}\\cudart64_100.dll",
        "origin": "add_dll_directory",
    }


def test_recorded_tf25807_cuda_path_variables_and_foreign_toolkit_are_reported() -> None:
    """tensorflow/tensorflow#25807: three toolkits' CUDA_PATH* variables, v11.3's bin on PATH."""
    environ, files = recorded_machine("win10-tf25807-cuda-path")
    verbatim = (RECORDED / "win10-tf25807-cuda-path" / "verbatim.txt").read_text(encoding="utf-8")
    posted = dict(line.split("=", 1) for line in verbatim.splitlines())
    catalog = load_catalog()
    p = probes(with_environment(files), environ, "3.7.16")
    report = diagnose(catalog, catalog.combo("tf114-cuda100"), "win-64", gtx1080(), p, Path(PREFIX))
    data = report.to_json()
    assert data["windows"]["cuda_path"] == posted
    by_id = {f.id: f.message for f in report.findings}
    assert all(f"{k}={v}" in by_id["cuda-path-variables"] for k, v in posted.items())
    assert by_id["foreign-cuda-dir"].endswith(environ["PATH"])
    # CUDA 11.3 holds no CUDA 10.0 runtime: TF 1.14's cudart64_100.dll is found nowhere
    assert data["windows"]["dlls"][0]["dll"] == "cudart64_100.dll"
    assert data["windows"]["dlls"][0]["loads"] is None
