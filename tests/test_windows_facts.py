"""What a Windows host user meets, checked on this Linux machine: the console code page, CUDA's
Windows file names, CUDA in a folder of the user's choice, the Windows release table's "10",
and TensorFlow >= 2.11 having no native-Windows GPU build. The same commands run under wine
with the official Windows CPython in tests/test_windows_host.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.activation import core
from envfactory.catalog.gpus import parse_capability
from envfactory.catalog.loader import load_catalog
from envfactory.diagnose.audit import audit_path
from envfactory.diagnose.compat import GpuSpec, check, parse_driver
from envfactory.diagnose.probes import version_from_file_name
from envfactory.solve.lock import lock_combo

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")


def test_render_to_a_non_ascii_folder_with_a_western_code_page_pipe_exits_0(
    tmp_path: Path,
) -> None:
    """A cp1252 pipe (what a Windows Python's stdout is when piped on a Western system) cannot
    encode 张三; the render wrote its files, then exited 1 with 'save the file as UTF-8'."""
    out = tmp_path / "张三" / "out dir"
    env = {**os.environ, "PYTHONIOENCODING": "cp1252"}
    done = subprocess.run(
        [ENVFACTORY, "render", "tf114-cuda100", "-p", "win-64", "-o", str(out)],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode("cp1252")
    assert b"UTF-8" not in done.stderr
    assert b"\\u5f20\\u4e09" in done.stdout  # written as escapes, not lost
    assert (out / "tf114-cuda100" / "environment.win-64.yml").is_file()


def test_cuda_windows_file_names_carry_major_and_minor() -> None:
    versions = {
        name: v.version if (v := version_from_file_name(name)) else None
        for name in (
            "C:\\CUDA\\bin\\cudart64_100.dll",
            "cudart64_101.dll",
            "cudart64_110.dll",
            "cublas64_100.dll",
            "cublas64_10.dll",
            "cudart64_12.dll",
            "cudnn64_7.dll",
        )
    }
    assert versions == {
        "C:\\CUDA\\bin\\cudart64_100.dll": "10.0",
        "cudart64_101.dll": "10.1",
        "cudart64_110.dll": "11.0",
        "cublas64_100.dll": "10.0",
        "cublas64_10.dll": "10",
        "cudart64_12.dll": "12",
        "cudnn64_7.dll": "7",
    }


def test_cuda_installed_into_a_folder_of_the_users_choice_is_foreign() -> None:
    for path in ("D:\\CUDA\\v10.0\\bin", "d:/cuda/v10.0/libnvvp", "E:\\CUDA10\\v10.0.130\\bin"):
        assert core.foreign_cuda(path, "windows"), path
    for path in ("D:\\CUDA\\vendor", "C:\\Users\\me\\vcuda\\v1\\bin", "D:\\cuda-notes\\docs"):
        assert not core.foreign_cuda(path, "windows"), path


def test_activation_drops_a_custom_cuda_folder_from_path() -> None:
    """The core's whole activate step on a Windows plan, run here by the host's Python."""
    plan = {
        "os": "windows",
        "dirsep": "\\",
        "separator": ";",
        "env_lib_suffix": "\\Library\\bin",
    }
    prefix = "C:\\Users\\张三\\envs\\tf114"
    assert core.foreign("D:\\CUDA\\v10.0\\bin", prefix, plan, lambda _: False)
    assert not core.foreign(prefix + "\\Library\\bin", prefix, plan, lambda _: False)


def test_driver_411_00_is_too_old_for_cuda_100_on_windows_only() -> None:
    catalog = load_catalog()
    combo = catalog.combo("tf114-cuda100")
    win = check(catalog, combo, GpuSpec(parse_capability("7.5")), "win-64", parse_driver("411.00"))
    linux = check(
        catalog, combo, GpuSpec(parse_capability("7.5")), "linux-64", parse_driver("411.00")
    )
    assert (win.verdict, linux.verdict) == ("driver-too-old", "supported")


def test_tf211_and_newer_have_no_native_windows_gpu_build() -> None:
    catalog = load_catalog()
    result = check(
        catalog, catalog.combo("tf211-cuda112"), GpuSpec(parse_capability("7.5")), "win-64", None
    )
    assert result.verdict == "platform-unsupported"
    assert "WSL2" in " ".join(result.reasons)


def test_audit_of_envfactorys_own_win64_lock_has_no_false_cuda_mismatch(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    """The Windows tested-build table says CUDA "10" for TF 1.13-2.0; the lock's cudatoolkit
    is 10.0.130: no cuda-mismatch. A CUDA 10.1 toolkit next to the same wheel still is one."""
    from test_lock import request

    result = lock_combo(request(test_channels, "tf114-cuda100", "win-64"), tmp_path)
    lockfile = next(f for f in result.files if f.name == "conda-lock.yml")
    [report] = audit_path(load_catalog(), lockfile)
    assert report.inventory.platform == "win-64"
    assert "cuda-mismatch" not in {f.id for f in report.findings}
    text = (
        "name: x\ndependencies:\n  - python=3.7.3=h8c8aaf0_1\n  - cudatoolkit=10.1.243=h74a9793_0\n"
        "  - pip:\n    - tensorflow-gpu==1.14.0\n"
    )
    (tmp_path / "env.yml").write_text(text, encoding="utf-8")
    [wrong] = audit_path(load_catalog(), tmp_path / "env.yml")
    assert "cuda-mismatch" in {f.id for f in wrong.findings}


def test_recommend_and_audit_say_tf211_has_no_native_windows_gpu_build(tmp_path: Path) -> None:
    from envfactory.diagnose.recommend import TfFilter, recommend

    catalog = load_catalog()
    gpu = [GpuSpec(parse_capability("8.6"))]
    win = recommend(catalog, gpu, "win-64", None, TfFilter(2, 15))
    assert win.candidates == () and "WSL2" in win.notes[0]
    assert recommend(catalog, gpu, "linux-64", None, TfFilter(2, 15)).notes == ()
    old = recommend(catalog, gpu, "win-64", None, TfFilter(2, 10))
    assert old.notes == () and old.candidates
    text = (
        "@EXPLICIT\n"
        "https://repo.anaconda.com/pkgs/main/win-64/python-3.10.13-h966fe2a_0.conda\n"
        "https://repo.anaconda.com/pkgs/main/win-64/tensorflow-2.12.0-mkl_py310hd99672f_0.conda\n"
    )
    (tmp_path / "explicit.txt").write_text(text, encoding="utf-8")
    [report] = audit_path(catalog, tmp_path / "explicit.txt")
    assert report.inventory.platform == "win-64"
    assert "no-windows-gpu-build" in {f.id for f in report.findings}


# --------------------------------------------------------------------------------------------
# Windows' 260-character limit: what create measures before linking (envfactory.install.
# longpaths); the registry read and the refusal itself run under wine in test_windows_host.py.

STAGING = "C:\\Users\\张三\\envs\\.tf114.envfactory-abcd1234ef56"
FINAL = "C:\\Users\\张三\\envs\\tf114"


def test_the_longest_target_path_comes_from_paths_json_and_the_wheel_manifests(
    tmp_path: Path,
) -> None:
    from envfactory.install import longpaths

    package = tmp_path / "cudnn-7.6.5-cuda10.0_0"
    (package / "info").mkdir(parents=True)
    deep = "Library/include/cudnn/" + "x" * 40 + ".h"
    paths = {"paths": [{"_path": "Library/bin/cudnn64_7.dll"}, {"_path": deep}], "paths_version": 1}
    (package / "info" / "paths.json").write_text(json.dumps(paths), encoding="utf-8")
    manifest = {
        "name": "tensorflow-gpu",
        "files": [
            ["purelib", "tensorflow/include/external/" + "y" * 60 + ".h", "sha256=", 1, 0, 0],
            ["scripts", "tb.py", "sha256=", 1, 0, 0],
        ],
        "scripts": [["tensorboard", "tensorboard.main", "run"]],
    }
    rels = [*longpaths.conda_paths([package]), *longpaths.wheel_paths([manifest])]
    assert deep in rels and "Scripts\\tensorboard.exe" in rels and "Scripts\\tb.py" in rels
    pip_rel = "Lib\\site-packages\\tensorflow/include/external/" + "y" * 60 + ".h"
    assert pip_rel in rels
    length, path = longpaths.longest(STAGING, rels)
    expected = STAGING + "\\" + pip_rel.replace("/", "\\")
    assert (length, path) == (len(expected), expected)


def test_create_refuses_a_path_over_259_characters_without_long_paths() -> None:
    from envfactory.errors import UserInputError
    from envfactory.install import longpaths

    rel = "Lib\\site-packages\\" + "z" * (259 - len(STAGING) - 1 - len("Lib\\site-packages\\"))
    assert longpaths.longest(STAGING, [rel])[0] == 259
    longpaths.check([STAGING, FINAL], [rel], enabled=False)  # 259: still fits
    longer = rel + "z"
    with pytest.raises(UserInputError) as caught:
        longpaths.check([STAGING, FINAL], [longer], enabled=False)
    assert "260 characters long, over Windows' limit of 259" in caught.value.message
    hint = caught.value.hint or ""
    assert "LongPathsEnabled" in hint and "maximum-file-path-limitation" in hint
    # one character less in the prefix fits: the hint names that length
    assert f"prefix of at most {len(FINAL) - 1} characters" in hint
    longpaths.check([STAGING, FINAL], [longer], enabled=True)  # long paths on: no limit
    longpaths.check([STAGING, FINAL], [longer], enabled=None)  # not Windows: no limit


def test_doctor_reports_long_paths_off_on_windows() -> None:
    from test_doctor import RecordedProbes

    from envfactory.diagnose.doctor import diagnose
    from envfactory.diagnose.nvml import MachineGpus
    from envfactory.diagnose.probes import MappingFs

    catalog = load_catalog()
    combo = catalog.combo("tf114-cuda100")
    gpus = MachineGpus("nvml", "411.31", 10000, ())
    environ = {"PATH": "C:\\Windows\\System32", "SystemRoot": "C:\\Windows"}
    off = RecordedProbes("windows", environ, MappingFs({}, "windows"), long_paths=False)
    report = diagnose(catalog, combo, "win-64", gpus, off)
    assert report.to_json()["windows"]["long_paths_enabled"] is False
    assert "long-paths-disabled" in {f.id for f in report.findings}
    on = RecordedProbes("windows", environ, MappingFs({}, "windows"), long_paths=True)
    report = diagnose(catalog, combo, "win-64", gpus, on)
    assert report.to_json()["windows"]["long_paths_enabled"] is True
    assert "long-paths-disabled" not in {f.id for f in report.findings}


def test_only_the_host_adapter_imports_a_host_only_module() -> None:
    """Not only at import time (tests/test_architecture.py): nowhere but envfactory/host.py,
    so what POSIX and Windows do differently (locks, users, junctions, the registry) has one
    home, and a Linux-only run of the suite covers every caller's host-neutral path."""
    import ast

    from test_architecture import MODULES, PACKAGE, POSIX_ONLY, WINDOWS_ONLY

    found = []
    for path in MODULES:
        if path == PACKAGE / "host.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module.split(".")[0]]
            else:
                continue
            hits = [n for n in names if n in POSIX_ONLY | WINDOWS_ONLY]
            found += [f"{path.name}:{node.lineno} {n}" for n in hits]
    assert found == []
