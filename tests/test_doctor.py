"""doctor against the recorded H200 probe and synthetic library layouts (Windows ones included)."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pynvml
import pytest

from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import OperatingSystem
from envfactory.diagnose.doctor import diagnose, matmul_finding, matmul_tolerance
from envfactory.diagnose.nvml import (
    MachineGpus,
    parse_nvml_dump,
    parse_smi_q,
    parse_smi_query,
    probe_nvml,
)
from envfactory.diagnose.probes import (
    FsView,
    LibraryVersion,
    MappingFs,
    MeasuredLoad,
    Nvcc,
    PrefixPackages,
    TfCheck,
    env_python,
    foreign_cuda_dirs,
    library_names,
    locate,
    parse_ldconfig,
    parse_nvcc_version,
    parse_tf_check,
    read_prefix_packages,
    search_dirs,
    variable_dirs,
)

H200 = Path(__file__).parent / "data" / "probes" / "h200-linux"
ENVFACTORY = str(Path(sys.executable).parent / "envfactory")


class RecordedProbes:
    """The MachineProbes adapter fed from recordings instead of the live machine."""

    def __init__(
        self,
        os_name: OperatingSystem,
        environ: Mapping[str, str],
        fs: FsView,
        ldcache: Mapping[str, Sequence[str]] | None = None,
        tf: TfCheck | None = None,
        versions: Mapping[str, LibraryVersion] | None = None,
        nvcc: Nvcc | None = None,
        wsl: tuple[str, ...] = (),
        packages: PrefixPackages | None = None,
        cwd: str = "C:\\Users\\user",
        known_dlls: frozenset[str] = frozenset(),
        measured: Mapping[str, MeasuredLoad] | None = None,
        long_paths: bool | None = None,
    ) -> None:
        self.os_name = os_name
        self._long_paths = long_paths
        self._cwd = cwd
        self._known_dlls = known_dlls
        self._measured = measured or {}
        self._environ = environ
        self._fs = fs
        self._ldcache = ldcache or {}
        self._tf = tf
        self._versions = versions or {}
        self._nvcc = nvcc
        self._wsl = wsl
        self._packages = packages or PrefixPackages({}, {}, {}, {})

    def environ(self) -> Mapping[str, str]:
        return self._environ

    def fs(self) -> FsView:
        return self._fs

    def cwd(self) -> str:
        return self._cwd

    def known_dlls(self) -> frozenset[str]:
        return self._known_dlls

    def long_paths(self) -> bool | None:
        return self._long_paths

    def measure_loads(
        self, prefix: Path, requests: Sequence[tuple[str, str]]
    ) -> Mapping[str, MeasuredLoad]:
        return {name: self._measured[name] for name, _ in requests if name in self._measured}

    def ldcache(self) -> Mapping[str, Sequence[str]]:
        return self._ldcache

    def tf_check(self, prefix: Path) -> TfCheck:
        assert self._tf is not None
        return self._tf

    def library_version(self, role: str, path: str) -> LibraryVersion | None:
        return self._versions.get(path)

    def nvcc(self) -> Nvcc | None:
        return self._nvcc

    def wsl(self) -> tuple[str, ...]:
        return self._wsl

    def packages(self, prefix: Path) -> PrefixPackages:
        return self._packages


def h200_probes() -> RecordedProbes:
    environ = dict(
        line.split("=", 1)
        for line in (H200 / "env-cuda-vars.txt").read_text().splitlines()
        if "=" in line
    )
    fs = MappingFs.from_listing((H200 / "cuda-libs.txt").read_text().split(), "linux")
    cache = parse_ldconfig((H200 / "ldconfig-p-cuda.txt").read_text())
    nvcc = Nvcc(
        "/usr/local/cuda/bin/nvcc", parse_nvcc_version((H200 / "nvcc-version.txt").read_text())
    )
    # what the file names in cuda-libs.txt say the sonames resolve to
    versions = {"/lib/x86_64-linux-gnu/libcudnn.so.9": LibraryVersion("9.14.0", "file name")}
    return RecordedProbes("linux", environ, fs, cache, versions=versions, nvcc=nvcc)


def h200_machine() -> MachineGpus:
    return parse_nvml_dump((H200 / "nvml.txt").read_text())


def test_h200_nvml_and_smi_recordings_agree() -> None:
    nvml = h200_machine()
    smi = parse_smi_q((H200 / "nvidia-smi-q.txt").read_text())
    for m in (nvml, smi):
        assert m.driver == "580.159.04" and m.cuda_driver_api == "13.0"
        assert [(g.name, str(g.cc), g.memory_total_mib) for g in m.gpus] == [
            ("NVIDIA H200", "9.0", 143771)
        ]
    assert smi.gpus[0].cc_from == "name" and nvml.gpus[0].cc_from == "driver"


def test_doctor_h200_tf114_is_gpu_too_new_and_tf215_runs() -> None:
    catalog = load_catalog()
    old = diagnose(
        catalog, catalog.combo("tf114-cuda100"), "linux-64", h200_machine(), h200_probes()
    )
    assert [c.verdict for c in old.compat] == ["gpu-too-new"]
    assert old.problems >= 1
    new = diagnose(
        catalog, catalog.combo("tf215-cuda122"), "linux-64", h200_machine(), h200_probes()
    )
    assert [c.verdict for c in new.compat] == [
        "ptx-jit"
    ]  # tf-pip-2.15-2.17: SASS up to 8.0, PTX 9.0
    assert new.problems == 0
    data = new.to_json()
    assert data["driver"]["driver"] == "580.159.04" and data["driver"]["gpus"][0]["cc"] == "9.0"
    # /usr/local/cuda/bin on PATH is a CUDA install outside any environment
    assert {"path": "/usr/local/cuda/bin", "origin": "PATH"} in data["foreign_cuda_dirs"]


def test_h200_system_cudnn9_is_found_through_the_ld_cache() -> None:
    catalog = load_catalog()
    report = diagnose(
        catalog, catalog.combo("tf218-cuda125"), "linux-64", h200_machine(), h200_probes()
    )
    cudnn = next(lib for lib in report.libraries if lib.name.role == "cudnn")
    assert cudnn.name.file == "libcudnn.so.9"
    assert cudnn.loads is not None and cudnn.loads.origin == "ld.so.cache"
    assert any(f.id == "library-foreign" and "libcudnn.so.9" in f.message for f in report.findings)


def test_library_names_follow_the_cuda_and_cudnn_majors() -> None:
    catalog = load_catalog()
    names = {
        (c, os_name): [n.file for n in library_names(catalog.combo(c), os_name)]
        for c in ("tf114-cuda100", "tf22-cuda101", "tf26-cuda112", "tf215-cuda122")
        for os_name in ("windows", "linux")
    }
    assert names["tf114-cuda100", "windows"] == [
        "cudart64_100.dll",
        "cublas64_100.dll",
        "cudnn64_7.dll",
    ]
    assert names["tf114-cuda100", "linux"] == [
        "libcudart.so.10.0",
        "libcublas.so.10.0",
        "libcudnn.so.7",
    ]
    assert names["tf22-cuda101", "windows"] == [
        "cudart64_101.dll",
        "cublas64_10.dll",
        "cudnn64_7.dll",
    ]
    assert names["tf26-cuda112", "linux"] == [
        "libcudart.so.11.0",
        "libcublas.so.11",
        "libcudnn.so.8",
    ]
    assert names["tf215-cuda122", "linux"] == [
        "libcudart.so.12",
        "libcublas.so.12",
        "libcudnn.so.8",
    ]


PREFIX = "C:\\Users\\lab\\miniconda3\\envs\\tf114"
CUDA10 = "C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v10.0\\bin"


def windows_probes(tree: Mapping[str, Sequence[str]], path: Sequence[str]) -> RecordedProbes:
    environ = {"PATH": ";".join(path), "SystemRoot": "C:\\Windows"}
    return RecordedProbes("windows", environ, MappingFs(tree, "windows"))


def test_windows_search_order_system32_beats_path_and_case_is_ignored() -> None:
    combo = load_catalog().combo("tf114-cuda100")
    tree = {
        "C:\\Windows\\System32": ["CUDNN64_7.DLL", "kernel32.dll"],
        f"{PREFIX}\\Library\\bin": ["cudart64_100.dll", "cublas64_100.dll", "cudnn64_7.dll"],
        CUDA10: ["cudart64_100.dll", "cudnn64_7.dll"],
    }
    probes = windows_probes(tree, [CUDA10, f"{PREFIX}\\Library\\bin", "C:\\Windows\\system32"])
    dirs = search_dirs("windows", probes.environ(), PREFIX)
    cudnn = locate(library_names(combo, "windows")[2], dirs, probes.fs(), "windows")
    assert [(c.path, c.origin) for c in cudnn.copies] == [
        ("C:\\Windows\\System32\\cudnn64_7.dll", "system"),
        (f"{CUDA10}\\cudnn64_7.dll", "PATH"),
        (f"{PREFIX}\\Library\\bin\\cudnn64_7.dll", "PATH"),
    ]
    cudart = locate(library_names(combo, "windows")[0], dirs, probes.fs(), "windows")
    assert cudart.loads is not None and cudart.loads.path == f"{CUDA10}\\cudart64_100.dll"


def test_doctor_windows_layout_reports_shadowed_dlls_and_foreign_dirs() -> None:
    catalog = load_catalog()
    tree = {
        "C:\\Windows\\System32": ["cudnn64_7.dll"],
        f"{PREFIX}\\Library\\bin": ["cudart64_100.dll", "cublas64_100.dll", "cudnn64_7.dll"],
        CUDA10: ["cudart64_100.dll", "cublas64_100.dll"],
    }
    probes = windows_probes(tree, [CUDA10, f"{PREFIX}\\Library\\bin"])
    machine = MachineGpus(
        "nvml",
        "411.31",
        10000,
        parse_smi_query("0, GeForce GTX 1080, 6.1, 8192, GPU-x, 411.31").gpus,
    )
    report = diagnose(catalog, catalog.combo("tf114-cuda100"), "win-64", machine, probes)
    assert [c.verdict for c in report.compat] == ["supported"]
    assert [d.path for d in report.foreign_dirs] == [CUDA10]
    loads = {lib.name.file: lib.loads.path for lib in report.libraries if lib.loads}
    assert loads == {
        "cudart64_100.dll": f"{CUDA10}\\cudart64_100.dll",
        "cublas64_100.dll": f"{CUDA10}\\cublas64_100.dll",
        "cudnn64_7.dll": "C:\\Windows\\System32\\cudnn64_7.dll",
    }


def test_doctor_with_prefix_flags_shadowing_and_reports_tf_tiers() -> None:
    catalog = load_catalog()
    tree = {
        "C:\\Windows\\System32": ["cudnn64_7.dll"],
        f"{PREFIX}\\Library\\bin": ["cudart64_100.dll", "cublas64_100.dll", "cudnn64_7.dll"],
    }
    stdout = "ENVFACTORY_TF_CHECK " + json.dumps(
        {
            "tensorflow": "1.14.0",
            "built_with_cuda": True,
            "devices": [
                {"name": "/device:GPU:0", "memory_bytes": 7 * 1024**3, "description": "GTX 1080"}
            ],
            "matmul": None,
            "errors": {"matmul": "InternalError: Blas GEMM launch failed : a.shape=(256, 256)"},
        }
    )
    tf = parse_tf_check(f"{PREFIX}\\python.exe", stdout, "", 0)
    probes = RecordedProbes(
        "windows",
        {"PATH": f"{PREFIX}\\Library\\bin", "SystemRoot": "C:\\Windows"},
        MappingFs(tree, "windows"),
        tf=tf,
    )
    machine = MachineGpus(
        "nvml",
        "411.31",
        10000,
        parse_smi_query("0, GeForce GTX 1080, 6.1, 8192, GPU-x, 411.31").gpus,
    )
    report = diagnose(
        catalog, catalog.combo("tf114-cuda100"), "win-64", machine, probes, Path(PREFIX)
    )
    ids = {f.id: f for f in report.findings}
    assert ids["library-shadowed"].severity == "problem"
    assert "System32" in ids["library-shadowed"].message
    assert "tf-built-with-cuda" in ids and "tf-gpu-devices" in ids
    assert ids["tf-matmul-failed"].severity == "problem"
    assert report.to_json()["tensorflow"]["errors"]["matmul"].startswith("InternalError")


def test_no_driver_is_a_finding_not_a_traceback() -> None:
    machine = probe_nvml(pynvml)  # this machine has no NVIDIA driver library
    if machine.source != "none":  # pragma: no cover - only on a GPU machine
        pytest.skip("this machine has an NVIDIA driver: nothing to show here")
    assert "NVML Shared Library Not Found" in machine.problems[0]
    catalog = load_catalog()
    report = diagnose(catalog, catalog.combo("tf114-cuda100"), "linux-64", machine, h200_probes())
    assert [f.id for f in report.findings if f.severity == "problem"] == ["no-nvidia-driver"]


def test_cli_doctor_exits_3_with_json_when_no_driver() -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no nvidia-smi on it
    done = subprocess.run(
        [ENVFACTORY, "doctor", "tf114-cuda100", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    data = json.loads(done.stdout)
    if data["driver"]["source"] != "none":  # pragma: no cover - only on a GPU machine
        pytest.skip("this machine has an NVIDIA driver: nothing to show here")
    assert done.returncode == 3
    assert data["findings"][0]["id"] == "no-nvidia-driver" and data["problems"] >= 1
    assert "Traceback" not in done.stderr


# ---- the matmul tier: tolerance from the precision in use (TF32 on Ampere and later)


K = 64
Matrix = list[list[float]]


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _tf32(x: float) -> float:
    """Truncate a float32 to TF32's 10 explicit mantissa bits (the worst case of the conversion)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0] & 0xFFFFE000
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def _matmul(a: Matrix, b: Matrix, tf32: bool) -> Matrix:
    """fp32 accumulation, one rounding per multiply and per add (what a GPU dot product does)."""
    conv = _tf32 if tf32 else _f32
    out = []
    for row in a:
        line = []
        for j in range(len(b[0])):
            acc = 0.0
            for i, x in enumerate(row):
                acc = _f32(acc + _f32(conv(x) * conv(b[i][j])))
            line.append(acc)
        out.append(line)
    return out


def _operands() -> tuple[Matrix, Matrix]:
    rng = random.Random(0)
    a = [[_f32(rng.gauss(0, 1)) for _ in range(K)] for _ in range(16)]
    b = [[_f32(rng.gauss(0, 1)) for _ in range(16)] for _ in range(K)]
    return a, b


def _matmul_result(got: Matrix, a: Matrix, b: Matrix, tf32: bool) -> dict[str, Any]:
    errors, ratios = [], []
    for r, row in enumerate(a):
        for j in range(len(b[0])):
            exact = sum(x * b[i][j] for i, x in enumerate(row))
            bound = sum(abs(x * b[i][j]) for i, x in enumerate(row))
            errors.append(abs(got[r][j] - exact))
            ratios.append(errors[-1] / bound)
    return {
        "device": "/job:localhost/replica:0/task:0/device:GPU:0",
        "max_abs_error": max(errors),
        "max_error_over_bound": max(ratios),
        "k": K,
        "tf32_enabled": tf32,
        "compute_capability": "9.0",
    }


def test_tf32_matmul_passes_with_the_tf32_tolerance_and_would_fail_the_fp32_one() -> None:
    a, b = _operands()
    m = _matmul_result(_matmul(a, b, tf32=True), a, b, tf32=True)
    assert 1e-3 < float(m["max_abs_error"]) < 0.1  # the order the H200 showed (0.0236 at k=256)
    assert matmul_finding(m, None).id == "tf-matmul"
    ratio = float(m["max_error_over_bound"])
    assert matmul_tolerance("fp32", K) < ratio <= matmul_tolerance("tf32", K)
    m_fp32 = {**m, "tf32_enabled": False}
    assert matmul_finding(m_fp32, None).id == "tf-matmul-wrong"  # TF32 off: same error is wrong
    old_gpu = {**m, "compute_capability": "7.5"}  # Turing has no TF32: fp32 tolerance applies
    assert matmul_finding(old_gpu, None).id == "tf-matmul-wrong"


def test_fp32_matmul_passes_both_and_a_wrong_result_fails_both() -> None:
    a, b = _operands()
    got = _matmul(a, b, tf32=False)
    for tf32 in (False, True):
        assert matmul_finding(_matmul_result(got, a, b, tf32), None).id == "tf-matmul"
    wrong = [list(row) for row in got]
    wrong[3][7] += 0.5
    for tf32 in (False, True):
        finding = matmul_finding(_matmul_result(wrong, a, b, tf32), None)
        assert finding.id == "tf-matmul-wrong" and "differs from numpy" in finding.message


def test_matmul_says_whether_it_ran_on_the_cpu_or_differed() -> None:
    a, b = _operands()
    on_cpu = {**_matmul_result(_matmul(a, b, False), a, b, False), "device": "/device:CPU:0"}
    finding = matmul_finding(on_cpu, None)
    assert finding.id == "tf-matmul-not-on-gpu" and "ran on /device:CPU:0, not on a GPU" in (
        finding.message
    )
    assert matmul_finding(None, "InternalError: x").id == "tf-matmul-failed"


# ---- the sharper machine checks


def test_h200_report_has_versions_driver_cuda_nvcc_and_each_path_entry_once() -> None:
    catalog = load_catalog()
    report = diagnose(
        catalog, catalog.combo("tf218-cuda125"), "linux-64", h200_machine(), h200_probes()
    )
    ids = {f.id: f for f in report.findings}
    assert "libcudnn.so.9 is version 9.14.0 (from file name)" in ids["cudnn-version"].message
    assert ids["driver-cuda"].severity == "info" and "up to 13.0" in ids["driver-cuda"].message
    assert (
        ids["nvcc-other-cuda"].severity == "warning"
        and "CUDA 13.0" in ids["nvcc-other-cuda"].message
    )
    data = report.to_json()
    assert data["nvcc"] == {"path": "/usr/local/cuda/bin/nvcc", "version": "13.0"}
    cudnn = next(lib for lib in data["libraries"] if lib["role"] == "cudnn")
    assert cudnn["version"] == {"version": "9.14.0", "how": "file name"}
    doubled = {"PATH": "/usr/local/cuda/bin:/usr/bin:/usr/local/cuda/bin/"}
    assert [d.path for d in foreign_cuda_dirs(variable_dirs("linux", doubled), "linux")] == [
        "/usr/local/cuda/bin"
    ]


def test_cudnn_older_than_the_combo_is_a_problem_when_the_library_says_so() -> None:
    catalog = load_catalog()
    probes = h200_probes()
    probes._versions = {"/lib/x86_64-linux-gnu/libcudnn.so.9": LibraryVersion("9.0.0", "ctypes")}
    combo = catalog.combo("tf218-cuda125")
    report = diagnose(catalog, combo, "linux-64", h200_machine(), probes)
    wanted = tuple(int(x) for x in combo.cudnn.value.split(".")[:2])
    problems = {f.id for f in report.findings if f.severity == "problem"}
    assert wanted > (9, 0)  # the combo pins a cuDNN 9 newer than 9.0
    assert "cudnn-too-old" in problems


def test_driver_older_than_the_combo_cuda_and_wsl2_are_reported() -> None:
    catalog = load_catalog()
    machine = MachineGpus(
        "nvml", "470.82", 11040, parse_smi_query("0, NVIDIA A100, 8.0, 40960, GPU-x, 470.82").gpus
    )
    probes = h200_probes()
    probes._wsl = ("/usr/lib/wsl/lib", "/dev/dxg")
    report = diagnose(catalog, catalog.combo("tf215-cuda122"), "linux-64", machine, probes)
    ids = {f.id: f for f in report.findings}
    assert ids["driver-cuda-too-old"].severity == "problem"
    assert "up to 11.4" in ids["driver-cuda-too-old"].message
    assert "never install a Linux NVIDIA driver" in (ids["wsl2"].fix or "")
    assert report.to_json()["wsl"] == ["/usr/lib/wsl/lib", "/dev/dxg"]


def _write_prefix(root: Path) -> Path:
    site = root / "lib" / "python3.10" / "site-packages"
    for dist in ("nvidia_cudnn_cu11-8.6.0.163", "nvidia_cublas_cu12-12.3.4.1", "tensorflow-2.15.0"):
        (site / f"{dist}.dist-info").mkdir(parents=True)
    meta = root / "conda-meta"
    meta.mkdir()
    (meta / "cudnn-8.9.2.26-cuda12_0.json").write_text(
        json.dumps({"name": "cudnn", "version": "8.9.2.26", "build": "cuda12_0", "channel": "x"})
    )
    (root / "bin").mkdir()
    return root


def test_pip_nvidia_wheels_in_a_prefix_are_listed_and_flagged(tmp_path: Path) -> None:
    prefix = _write_prefix(tmp_path / "env")
    packages = read_prefix_packages(prefix)
    assert (
        packages.pip["nvidia-cudnn-cu11"] == "8.6.0.163" and packages.conda["cudnn"] == "8.9.2.26"
    )
    catalog = load_catalog()
    tf = parse_tf_check(str(prefix / "bin" / "python"), "", "boom", 1)
    probes = h200_probes()
    probes._tf, probes._packages = tf, packages
    report = diagnose(
        catalog, catalog.combo("tf215-cuda122"), "linux-64", h200_machine(), probes, prefix
    )
    messages = [(f.id, f.message) for f in report.findings]
    assert any(i == "nvidia-wheels" and "nvidia-cublas-cu12 12.3.4.1" in m for i, m in messages)
    assert any(i == "nvidia-wheel-duplicates-conda" and "conda's cudnn" in m for i, m in messages)
    assert any(i == "nvidia-wheel-other-cuda" and "nvidia-cudnn-cu11" in m for i, m in messages)


@pytest.mark.parametrize("layout", ["conda", "venv"])
def test_windows_prefix_python_for_conda_and_venv(tmp_path: Path, layout: str) -> None:
    exe = tmp_path / ("python.exe" if layout == "conda" else "Scripts/python.exe")
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("")
    assert env_python(tmp_path, "windows") == exe
