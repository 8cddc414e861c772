"""``--solver conda-lock``: the real ``conda-lock lock`` CLI, run as a subprocess with the user's
conda binary, as the solver of one platform. An adapter of the solve stage: conda-lock's Python
API is used only by ``lockfile/condalock_adapter.py``; the lock it writes is read back by
``lockfile.read``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from envfactory.catalog.platforms import Platform
from envfactory.errors import ToolError
from envfactory.lockfile.models import LOCK_FILE, LockedPackage
from envfactory.lockfile.read import read_lock

CONDA_EXECUTABLES = ("micromamba", "mamba", "conda")
CLI_TIMEOUT_S = 1800


def find_conda(environ: Mapping[str, str]) -> str | None:
    """The user's conda, mamba or micromamba (``CONDA_EXE``/``MAMBA_EXE`` first, then PATH).
    Never ensureconda: without a binary it retries downloads for over a minute."""
    for var in ("MAMBA_EXE", "CONDA_EXE"):
        exe = environ.get(var)
        if exe and Path(exe).is_file():
            return exe
    for name in CONDA_EXECUTABLES:
        found = shutil.which(name, path=environ.get("PATH"))
        if found:
            return found
    return None


def solve_with_cli(
    env_file: Path,
    virtual_packages: Path,
    platform: Platform,
    channels: Sequence[str],
    environ: Mapping[str, str],
) -> list[LockedPackage]:
    """Run ``conda-lock lock`` for one platform and read back its packages."""
    conda = find_conda(environ)
    if conda is None:
        raise ToolError(
            "--solver conda-lock needs conda, mamba or micromamba, and none was found "
            "(looked at MAMBA_EXE, CONDA_EXE and PATH)",
            "install micromamba (https://mamba.readthedocs.io) and put it on PATH, "
            "or use the default solver (--solver rattler), which needs no conda",
        )
    script = Path(sys.executable).parent / "conda-lock"
    command = [str(script) if script.exists() else "conda-lock", "lock", "--conda", conda]
    if Path(conda).name.startswith("micromamba"):
        command.append("--micromamba")
    elif Path(conda).name.startswith("mamba"):
        command.append("--mamba")
    with tempfile.TemporaryDirectory(prefix="envfactory-conda-lock-") as tmp:
        out = Path(tmp) / LOCK_FILE
        command += ["-f", str(env_file), "--virtual-package-spec", str(virtual_packages)]
        command += ["-p", platform, "--lockfile", str(out)]
        for url in channels:
            command += ["-c", url]
        try:
            proc = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=CLI_TIMEOUT_S,
                env=dict(environ),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ToolError(f"conda-lock lock ran longer than {CLI_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise ToolError(
                f"conda-lock lock failed for {platform} (exit {proc.returncode}):\n{tail}",
                "the default solver (--solver rattler) gives a plainer explanation",
            )
        lock = read_lock(out)
    return [p for p in lock.packages if p.platform == platform and p.manager == "conda"]
