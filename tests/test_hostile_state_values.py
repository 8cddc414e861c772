"""Project variables go into ``conda-meta/state``; conda's activators then paste each value into
shell code between quotes, unescaped (issue 10, row 5: ``x'; touch ...; '`` ran in bash, and
backticks in tcsh). ``untrusted.state_value_problem`` refuses what they cannot carry. Checked
here against conda's own templates (conda 24.7.1's ``conda/activate.py``, vendored by
conda-lock) run the way conda's shell wrappers run them, in the real shells:

* every value the check accepts arrives byte for byte in bash, zsh, dash, tcsh, fish and
  xonsh (and, under wine, cmd);
* every character it refuses breaks at least one of them (runs code, changes the value, or
  fails the activation): ``%`` and ``"`` in cmd; the three typographic double quotes only
  PowerShell reads as quotes, and PowerShell is not available here (said, not hidden).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shells.harness import Snap, Source, Step
from shells.wine import WinePrefix, run_cmd_sessions

from envfactory.untrusted import STATE_VALUE_BREAKERS, state_value_problem

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # conda-lock's vendored conda warns on import
    from conda_lock._vendor.conda.activate import (  # type: ignore[import-untyped,unused-ignore]
        CmdExeActivator,
        CshActivator,
        FishActivator,
        PosixActivator,
        XonshActivator,
    )

pytestmark = pytest.mark.shell

# How conda's shell wrappers (conda 24.7.1: etc/profile.d/conda.sh, conda.csh, conda.fish,
# conda.xsh) apply the activator's output; {file} holds that output.
SHELLS: dict[str, tuple[Any, list[str], str]] = {
    "bash": (PosixActivator, ["bash", "--norc", "--noprofile"], 'eval "$(cat {file})"\n'),
    "zsh": (PosixActivator, ["zsh", "-f"], 'eval "$(cat {file})"\n'),
    "dash": (PosixActivator, ["dash"], 'eval "$(cat {file})"\n'),
    "tcsh": (CshActivator, ["tcsh", "-f"], 'set ask_conda="`cat {file}`"\neval "${{ask_conda}}"\n'),
    "fish": (FishActivator, ["fish", "--no-config"], "eval (cat {file})\n"),
    "xonsh": (XonshActivator, ["xonsh", "--no-rc"], "execx($(cat {file}))\n"),
}
PROBE = "env -0 > {out}\n"


def run_activation(shell: str, values: dict[str, str], work: Path) -> dict[str, str] | None:
    """Apply conda's export lines for ``values`` in ``shell``; the exported environment after
    it, or None when the shell failed."""
    activator, argv, apply = SHELLS[shell]
    if shutil.which(argv[0]) is None:
        pytest.fail(f"{argv[0]} is not installed; ./scripts/test installs it")
    work.mkdir(parents=True, exist_ok=True)
    lines = activator.command_join.join(activator.export_var_tmpl % kv for kv in values.items())
    (work / "activate.out").write_text(lines + activator.command_join, encoding="utf-8")
    out = work / "env.out"
    script = work / "session"
    script.write_text(
        apply.format(file=work / "activate.out") + PROBE.format(out=out), encoding="utf-8"
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(work), "LANG": "C.UTF-8"}
    proc = subprocess.run(
        [*argv, str(script)], capture_output=True, env=env, cwd=work, timeout=120, check=False
    )
    if proc.returncode != 0 or not out.exists():
        return None
    pairs = (item.split("=", 1) for item in out.read_bytes().decode().split("\0") if "=" in item)
    return dict(pairs)


ACCEPTED = [
    "/srv/data",
    "C:/Users/me/data",
    r"C:\data\models",
    "a b  c",
    "caf\u00e9 \u6570\u636e \U0001f600",
    "x=y;z|w&v<u>t",
    "~user/*.txt [a-z]?",
    "^caret ~tilde",
    "(paren) {brace} #hash -dash",
    "semi;colon , comma @at",
    "",
    " leading and trailing ",
]
ASCII_ACCEPTED = [chr(c) for c in range(32, 127) if state_value_problem(chr(c)) is None]


def accepted_values() -> dict[str, str]:
    values = {f"EFYV_{i}": v for i, v in enumerate(ACCEPTED)}
    values |= {f"EFYC_{ord(c)}": f"a{c}b" for c in ASCII_ACCEPTED if c != "\\"}
    for following in sorted(set(ASCII_ACCEPTED) - set("\\'\"abfnrtv01234567xNuU$")):
        values[f"EFYB_{ord(following)}"] = f"a\\{following}b"
    for value in values.values():
        assert state_value_problem(value) is None, value
    return values


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_every_accepted_value_arrives_verbatim(shell: str, tmp_path: Path) -> None:
    values = accepted_values()
    assert len(values) > 100
    env = run_activation(shell, values, tmp_path)
    assert env is not None, f"{shell} failed on values the check accepts"
    wrong = {k: (v, env.get(k)) for k, v in values.items() if env.get(k) != v}
    assert wrong == {}


# One value per refusal reason the shells here can show; the PowerShell-only characters (the
# typographic double quotes) cannot be run on this machine.
REFUSED = {
    "single quote": "a'b",
    "double quote": 'a"b',
    "dollar": "a$HOME",
    "backtick": "a`echo x`b",
    "bang": "a!b",
    "newline": "a\nb",
    "carriage return": "a\rb",
    "backslash n": r"C:\new",
    "backslash U": r"C:\Users",
    "backslash quote": "a\\'b",
    "backslash backslash": "a\\\\b",
    "backslash x": r"a\x41b",
    "backslash dollar": "a\\$b",
    "trailing backslash": "C:\\dir\\",
    "injection": "x'; touch M; '",
}
POWERSHELL_ONLY = {"\u201c", "\u201d", "\u201e"}
CMD_ONLY = {"%"}


def test_the_refused_cases_cover_every_breaker() -> None:
    shown = {c for value in REFUSED.values() for c in value if c in STATE_VALUE_BREAKERS}
    assert set(STATE_VALUE_BREAKERS) == shown | POWERSHELL_ONLY | CMD_ONLY
    for value in REFUSED.values():
        assert state_value_problem(value) is not None, value


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_every_refused_value_breaks_some_activator(case: str, tmp_path: Path) -> None:
    value = REFUSED[case]
    broken = []
    for shell in SHELLS:
        env = run_activation(shell, {"EFY_X": value}, tmp_path / shell)
        if env is None or env.get("EFY_X") != value:
            broken.append(shell)
    assert broken, f"{value!r} arrived verbatim in every shell; the check need not refuse it"
    assert not (tmp_path / "bash" / "M").exists() or case == "injection"


# --- cmd, under wine: conda's activate.bat CALLs the temporary .bat the activator wrote ---------


@pytest.fixture(scope="module")
def wine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WinePrefix]:
    prefix = WinePrefix(tmp_path_factory.mktemp("state-wine") / "wineprefix")
    prefix.start()
    yield prefix
    prefix.stop()


def cmd_activation(
    wine: WinePrefix, cases: list[dict[str, str]], work: Path
) -> list[dict[str, str] | None]:
    """One session per case: CALL the .bat of conda's ``@SET "K=V"`` lines, then snap."""
    sessions: list[tuple[list[Step], dict[str, str]]] = []
    for n, values in enumerate(cases):
        bat = work / f"activate-{n}.bat"
        bat.parent.mkdir(parents=True, exist_ok=True)
        lines = [CmdExeActivator.export_var_tmpl % kv for kv in values.items()]
        bat.write_bytes(CmdExeActivator.command_join.join(lines).encode("ascii") + b"\n")
        sessions.append(([Source(bat), Snap()], {}))
    results, _ = run_cmd_sessions(wine, sessions, work / "driver")
    return [r.snaps[0] for r in results]


@pytest.mark.wine
def test_cmd_carries_the_accepted_ascii_values_and_breaks_on_the_refused(
    wine: WinePrefix, tmp_path: Path
) -> None:
    # cmd has no empty variables, and conda writes the .bat in the ANSI code page: ASCII only.
    accepted = {k: v for k, v in accepted_values().items() if v.isascii() and v}
    refused = {"percent": "a%PATH%b", "lone percent": "100%", "percent pair": "a%%b"}
    snaps = cmd_activation(wine, [accepted, *({"EFY_X": v} for v in refused.values())], tmp_path)
    got = snaps[0]
    assert got is not None
    assert {k: got.get(k) for k in accepted} == accepted
    for (case, value), snap in zip(refused.items(), snaps[1:], strict=True):
        assert snap is None or snap.get("EFY_X") != value, case
