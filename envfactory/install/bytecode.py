"""Bytecode compilation of a new environment, opt-in (``create --compile``).

Compiling runs the environment's own ``python`` (``python -m compileall``: only that
interpreter writes bytecode its import system accepts), so it is a program from a locked
package: ``create`` does not run it unless asked (no package code runs at create). Without
it Python writes the ``__pycache__`` files on first import where the prefix is writable, and
every first import pays for the compile (``tensorboard --version`` of a fresh environment:
seconds). It runs after the environment is in place, so the paths inside the bytecode are the
final ones; a failure leaves the environment as created, without (all) bytecode, and says so.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from envfactory.catalog.platforms import Platform, host_platform
from envfactory.errors import ToolError, UserInputError

TIMEOUT_S = 1800


def check_can_compile(platform: Platform) -> None:
    """Refuse ``--compile`` before anything is done when this machine cannot run the
    environment's python."""
    if platform != host_platform():
        raise UserInputError(
            f"--compile runs the environment's python, which a {platform} environment cannot "
            f"do on this {host_platform()} machine",
            "drop --compile (Python compiles on first import), or create on the target machine",
        )


def compile_site_packages(prefix: Path, platform: Platform, python: str) -> Path:
    """Compile ``prefix``'s site-packages with its own python; returns the folder compiled."""
    if platform.startswith("win"):  # pragma: no cover - Windows host
        interpreter, site = prefix / "python.exe", prefix / "Lib" / "site-packages"
    else:
        interpreter = prefix / "bin" / "python"
        site = prefix / "lib" / f"python{python}" / "site-packages"
    # isolated (-I): no user site, no PYTHON* variables; -j 0: one worker per core
    command = [str(interpreter), "-I", "-m", "compileall", "-q", "-j", "0", str(site)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(
            f"created {prefix}, but compiling its bytecode failed: {exc}",
            "the environment works without it (Python compiles on first import); to retry: "
            + " ".join(command),
        ) from None
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise ToolError(
            f"created {prefix}, but compiling its bytecode failed:\n  " + "\n  ".join(tail),
            "the environment works without it (Python compiles on first import); a file "
            "that does not compile is named above",
        )
    return site
