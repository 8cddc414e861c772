"""doctor against the recorded H200 probe and synthetic library layouts (Windows ones included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pynvml

from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import OperatingSystem
from envfactory.diagnose.doctor import diagnose
from envfactory.diagnose.nvml import (
    MachineGpus,
    parse_nvml_dump,
    parse_smi_q,
    parse_smi_query,
    probe_nvml,
)
from envfactory.diagnose.probes import (
    FsView,
    MappingFs,
    TfCheck,
    library_names,
    locate,
    parse_ldconfig,
    parse_tf_check,
    search_dirs,
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
    ) -> None:
        self.os_name = os_name
        self._environ = environ
        self._fs = fs
        self._ldcache = ldcache or {}
        self._tf = tf

    def environ(self) -> Mapping[str, str]:
        return self._environ

    def fs(self) -> FsView:
        return self._fs

    def ldcache(self) -> Mapping[str, Sequence[str]]:
        return self._ldcache

    def tf_check(self, prefix: Path) -> TfCheck:
        assert self._tf is not None
        return self._tf


def h200_probes() -> RecordedProbes:
    environ = dict(
        line.split("=", 1)
        for line in (H200 / "env-cuda-vars.txt").read_text().splitlines()
        if "=" in line
    )
    fs = MappingFs.from_listing((H200 / "cuda-libs.txt").read_text().split(), "linux")
    cache = parse_ldconfig((H200 / "ldconfig-p-cuda.txt").read_text())
    return RecordedProbes("linux", environ, fs, cache)


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
        return
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
        return
    assert done.returncode == 3
    assert data["findings"][0]["id"] == "no-nvidia-driver" and data["problems"] >= 1
    assert "Traceback" not in done.stderr
