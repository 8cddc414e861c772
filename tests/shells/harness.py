"""Run activation scripts in real shells and read the environment back through one probe.

A *session* is one shell process running a list of steps: source a script, set or unset a
variable (the user's own edits, or conda's), and ``snap``: the probe program ``env -0`` writes
the exported environment to a file. Every shell reads its environment through that same
program, so a value is compared byte for byte, never through a shell's own ``echo``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envfactory.activation import shellquote

UNIX_SHELLS = ("bash", "zsh", "dash", "fish", "tcsh", "xonsh")
SCRIPT_EXT = {
    "bash": "sh",
    "zsh": "sh",
    "dash": "sh",
    "fish": "fish",
    "tcsh": "csh",
    "xonsh": "xsh",
}
INSTALL_HINT = "./scripts/test installs it (apt-get install -y zsh fish tcsh xonsh wine wine64)"


@dataclass(frozen=True)
class Source:
    script: Path


@dataclass(frozen=True)
class SetVar:
    name: str
    value: str


@dataclass(frozen=True)
class UnsetVar:
    name: str


@dataclass(frozen=True)
class Snap:
    pass


Step = Source | SetVar | UnsetVar | Snap


def require(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise AssertionError(f"{program} is not installed; {INSTALL_HINT}")
    return found


def _line(shell: str, step: Step, snap_file: str) -> str:
    if shell in ("bash", "zsh", "dash"):
        q = shellquote.sh
        if isinstance(step, Source):
            return f". {q(str(step.script))}"
        if isinstance(step, SetVar):
            return f"export {step.name}={q(step.value)}"
        if isinstance(step, UnsetVar):
            return f"unset {step.name}"
        return f"env -0 > {q(snap_file)}"
    if shell == "fish":
        q = shellquote.fish
        if isinstance(step, Source):
            return f"source {q(str(step.script))}"
        if isinstance(step, SetVar):
            return f"set -gx {step.name} {q(step.value)}"
        if isinstance(step, UnsetVar):
            return f"set -e {step.name}"
        return f"env -0 > {q(snap_file)}"
    if shell == "tcsh":
        q = shellquote.csh
        if isinstance(step, Source):
            return f"source {q(str(step.script))}"
        if isinstance(step, SetVar):
            return f"setenv {step.name} {q(step.value)}"
        if isinstance(step, UnsetVar):
            return f"unsetenv {step.name}"
        return f"env -0 > {q(snap_file)}"
    if shell == "xonsh":
        q = shellquote.xonsh
        if isinstance(step, Source):
            return f"source {q(str(step.script))}"
        if isinstance(step, SetVar):
            return f"${{...}}[{q(step.name)}] = {q(step.value)}"
        if isinstance(step, UnsetVar):
            return f"${{...}}.pop({q(step.name)}, None)"
        return f"env -0 > @({q(snap_file)})"
    raise AssertionError(f"unknown shell {shell}")


def _command(shell: str, driver: Path) -> list[str]:
    exe = require(shell)
    return {
        "bash": [exe, "--norc", "--noprofile", str(driver)],
        "zsh": [exe, "-f", str(driver)],
        "dash": [exe, str(driver)],
        "fish": [exe, "--no-config", str(driver)],
        "tcsh": [exe, "-f", str(driver)],
        "xonsh": [exe, "--no-rc", str(driver)],
    }[shell]


def parse_env(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        if item:
            name, _, value = item.decode("utf-8", "surrogateescape").partition("=")
            out[name] = value
    return out


def run_session(
    shell: str, steps: Sequence[Step], env: Mapping[str, str], workdir: Path
) -> list[dict[str, str]]:
    """Run ``steps`` in one ``shell`` process started with exactly ``env``; one dict per Snap.
    Anything on stderr fails the test."""
    snaps, stderr = run_session_stderr(shell, steps, env, workdir)
    if stderr.strip():
        raise AssertionError(f"{shell} wrote to stderr:\n{stderr}")
    return snaps


def run_session_stderr(
    shell: str, steps: Sequence[Step], env: Mapping[str, str], workdir: Path
) -> tuple[list[dict[str, str]], str]:
    """``run_session``, returning what the session wrote to stderr as well."""
    workdir.mkdir(parents=True, exist_ok=True)
    snaps: list[Path] = []
    lines = []
    for step in steps:
        snap = workdir / f"snap{len(snaps)}.env"
        if isinstance(step, Snap):
            snaps.append(snap)
        lines.append(_line(shell, step, str(snap)))
    driver = workdir / f"driver.{shell}"
    driver.write_text("\n".join(lines) + "\n", encoding="utf-8")
    base = {"HOME": str(workdir), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    proc = subprocess.run(
        _command(shell, driver),
        env={**base, **env},
        capture_output=True,
        timeout=120,
        check=False,
        cwd=workdir,
    )
    stderr = proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        raise AssertionError(f"{shell} failed (rc {proc.returncode}):\n{stderr}")
    return [parse_env(s.read_bytes()) for s in snaps], stderr


RELEVANT_PREFIXES = ("_ENVFACTORY_", "CUDA_", "CONDA_")
RELEVANT = ("PATH", "LD_LIBRARY_PATH", "TF_CPP_MIN_LOG_LEVEL")


def relevant(env: Mapping[str, str]) -> dict[str, str]:
    """The variables activation may touch (plus the user's own test variables ``USER_*``)."""
    return {
        k: v for k, v in env.items() if k in RELEVANT or k.startswith((*RELEVANT_PREFIXES, "USER_"))
    }


def shell_env() -> dict[str, str]:
    """What the shells need besides the variables under test."""
    return {"TERM": "dumb", "XONSH_SHOW_TRACEBACK": "True"} | (
        {"TMPDIR": os.environ["TMPDIR"]} if "TMPDIR" in os.environ else {}
    )
