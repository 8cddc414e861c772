"""explain: real error excerpts from public issues (tests/data/logs/*.txt, source on line 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.explain import explain, patterns

LOGS = Path(__file__).parent / "data" / "logs"
ENVFACTORY = str(Path(sys.executable).parent / "envfactory")

EXPECTED = {
    "cudnn-not-found-linux.txt": ["cudnn-not-found"],
    "cudnn-not-found-linux-tf2.txt": ["cuda-library-not-found", "cudnn-not-found"],
    "cudart-not-found-windows.txt": ["cudart-not-found", "cuda-library-not-found"],
    "cudart-not-found-linux.txt": ["cudart-not-found"],
    "cudnn-version-mismatch.txt": ["cudnn-version-mismatch"],
    "conv-algorithm-failed.txt": ["conv-algorithm-failed"],
    "gpu-arch-unsupported-cc30.txt": ["gpu-arch-unsupported"],
    "gpu-arch-unsupported-rtx50.txt": ["gpu-arch-unsupported"],
    "gpu-arch-unsupported-ptx.txt": ["gpu-arch-unsupported"],
    "driver-too-old.txt": ["driver-too-old"],
    "no-gpu-driver.txt": ["no-gpu-driver"],
    "dll-load-failed.txt": ["dll-load-failed"],
    "blas-gemm-failed.txt": ["blas-gemm-failed"],
    "gpu-oom.txt": ["gpu-oom"],
    "numpy-too-new-tf114.txt": ["numpy-too-new"],
    "numpy-too-new-numpy2.txt": ["numpy-too-new"],
    "python-unsupported.txt": ["python-unsupported"],
    "cpu-build-installed.txt": ["cpu-build-installed"],
    "healthy-tf21-linux.txt": [],
    "healthy-tf2-windows.txt": [],
}


def test_every_log_is_listed_and_names_its_source() -> None:
    files = {p.name for p in LOGS.glob("*.txt")}
    assert files == set(EXPECTED)
    for name in files:
        first = (LOGS / name).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# source: https://github.com/"), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_log_yields_expected_problems(name: str) -> None:
    result = explain((LOGS / name).read_text(encoding="utf-8"))
    assert [p.id for p in result.problems] == EXPECTED[name]
    for p in result.problems:
        assert p.lines and p.cause and p.fix


def test_required_ids_are_all_recognized_somewhere() -> None:
    required = {
        "cudnn-not-found",
        "cudart-not-found",
        "cudnn-version-mismatch",
        "conv-algorithm-failed",
        "gpu-arch-unsupported",
        "driver-too-old",
        "no-gpu-driver",
        "dll-load-failed",
        "blas-gemm-failed",
        "gpu-oom",
        "numpy-too-new",
        "python-unsupported",
        "cpu-build-installed",
    }
    assert required <= {p.id for p in patterns()}
    seen = {pid for ids in EXPECTED.values() for pid in ids}
    assert required <= seen


def test_versions_are_read_from_the_line() -> None:
    result = explain((LOGS / "cudnn-version-mismatch.txt").read_text(encoding="utf-8"))
    assert "Loaded 8.7.0, TensorFlow was built with 8.9.4." in result.problems[0].cause


def test_cli_explain_stdin_json_and_exit_codes() -> None:
    text = (LOGS / "gpu-oom.txt").read_text(encoding="utf-8")
    done = subprocess.run(
        [ENVFACTORY, "explain", "-", "--json"],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    data = json.loads(done.stdout)
    assert [p["id"] for p in data["problems"]] == ["gpu-oom"]
    assert set(data["problems"][0]) == {"id", "lines", "cause", "fix"}
    healthy = subprocess.run(
        [ENVFACTORY, "explain", str(LOGS / "healthy-tf21-linux.txt"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert healthy.returncode == 0 and json.loads(healthy.stdout) == {"problems": []}
