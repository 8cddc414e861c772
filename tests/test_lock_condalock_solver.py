"""``lock --solver conda-lock`` runs the real ``conda-lock lock`` CLI. No conda binary exists on
these machines, so a rattler-backed stand-in (tests/tools/conda_shim.py) answers conda-lock's two
calls; conda-lock itself, its virtual-package channel and its lock file are the real ones. Both
solvers must lock the same packages. Because the stand-in solves with rattler too, that equality
only proves conda-lock's plumbing (its calls, its lock file, envfactory reading it back); what the
packages must be is checked against the catalog's pins, a statement neither solver made."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.catalog.loader import load_catalog
from envfactory.lockfile.read import read_lock

pytestmark = pytest.mark.slow  # conda-lock's own CLI solves, next to rattler

ENVFACTORY = shutil.which("envfactory", path=str(Path(sys.executable).parent))
SHIM = Path(__file__).parent / "tools" / "conda_shim.py"


@pytest.fixture
def conda_shim(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "conda"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SHIM}" "$@"\n')
    exe.chmod(0o755)
    return exe


def _lock(solver: str, out: Path, channel: Path, env: dict[str, str]) -> None:
    assert ENVFACTORY
    proc = subprocess.run(
        [ENVFACTORY, "lock", "tf114-cuda101", "-p", "linux-64", "--solver", solver,
         "--channel-map", f"defaults={channel}", "-o", str(out)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "linux-64: 10 conda + 0 pip packages" in proc.stdout


def test_conda_lock_cli_and_rattler_lock_the_same_packages(
    test_channels: dict[str, Path], conda_shim: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MAMBA_EXE"}
    env["CONDA_EXE"] = str(conda_shim)
    _lock("rattler", tmp_path / "r", test_channels["defaults"], env)
    _lock("conda-lock", tmp_path / "c", test_channels["defaults"], env)
    ours = read_lock(tmp_path / "r" / "tf114-cuda101" / "conda-lock.yml")
    theirs = read_lock(tmp_path / "c" / "tf114-cuda101" / "conda-lock.yml")

    def packages(lock: object) -> set[tuple[str, str, str, str | None, str | None]]:
        return {
            (p.name, p.version, p.build, p.md5, p.sha256)
            for p in lock.packages  # type: ignore[attr-defined]
        }

    assert packages(ours) == packages(theirs)
    locked = {(p[0], p[1], p[2]) for p in packages(theirs)}
    route = load_catalog().combo("tf114-cuda101").route("linux-64")
    pins = [p for p in route.conda_pins("3.7") if p.build]
    assert len(pins) >= 4
    assert [p.spec for p in pins if (p.name, p.version, p.build) not in locked] == []
    assert ("tensorflow-base", "1.14.0", "gpu_py37he45bfe2_0") in {p[:3] for p in packages(theirs)}
    text = (tmp_path / "c" / "tf114-cuda101" / "conda-lock.yml").read_text()
    assert "envfactory.regenerate: envfactory lock tf114-cuda101 --solver conda-lock" in text
