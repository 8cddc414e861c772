"""PowerShell (win-64). No PowerShell runs on these machines (research/feasibility.md), so the
stubs are kept small enough that reading them is the review, tree-sitter-powershell parses
every generated .ps1, and the core's PowerShell output is held to its two statement forms:
``$Env:NAME = <expr>`` and ``$Env:NAME = $null``, where <expr> is single-quoted runs of
printable ASCII and ``[char]0xHHHH`` code units joined by `` + ``. Each form is parsed by
tree-sitter and decoded back to the value, for arbitrary Unicode values (hypothesis)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tree_sitter_powershell
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_sitter import Language, Node, Parser

from envfactory import __version__
from envfactory.activation import core
from envfactory.activation.plan import activation_scripts, install_activation
from envfactory.catalog.loader import load_catalog

PARSER = Parser(Language(tree_sitter_powershell.language()))
WINDOWS_COMBOS = sorted(n for n, c in load_catalog().combos.items() if "win-64" in c.platforms)
PIECE = r"(?:'(?:[ -&(-~]|'')*'|\[char\]0x[0-9A-F]{4})"  # printable ASCII but ', or ''
SET = re.compile(rf"\$Env:([A-Za-z_][A-Za-z0-9_]*) = ({PIECE}(?: \+ {PIECE})*)\Z")
UNSET = re.compile(r"\$Env:([A-Za-z_][A-Za-z0-9_]*) = \$null\Z")
TOKEN = re.compile(r"'((?:[^']|'')*)'|\[char\]0x([0-9A-F]{4})")


def syntax_errors(source: str) -> list[str]:
    tree = PARSER.parse(source.encode("utf-8"))
    found: list[str] = []
    stack: list[Node] = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            found.append(f"{node.start_point[0] + 1}:{node.start_point[1] + 1}: {node.type}")
        stack.extend(node.children)
    return found


def decode(expr: str) -> str:
    """The string a PowerShell expression of the emitter's form evaluates to."""
    units = bytearray()
    for quoted, code in TOKEN.findall(expr):
        if code:
            units += int(code, 16).to_bytes(2, "little")
        else:
            units += quoted.replace("''", "'").encode("utf-16-le")
    return units.decode("utf-16-le", "surrogatepass")


@pytest.mark.parametrize("name", WINDOWS_COMBOS)
def test_every_ps1_stub_parses_and_is_small(name: str) -> None:
    files = activation_scripts(load_catalog().combo(name), "win-64")
    stubs = {f.relpath: f.content for f in files if f.relpath.endswith(".ps1")}
    assert sorted(stubs) == [
        f"etc/conda/activate.d/envfactory-{name}.ps1",
        f"etc/conda/deactivate.d/envfactory-{name}.ps1",
    ]
    for content in stubs.values():
        assert f"envfactory {__version__}" in content.splitlines()[0]
        assert not syntax_errors(content)
        assert len(content.splitlines()) <= 20
        assert "Invoke-Expression" in content and "$LASTEXITCODE -eq 0" in content


def test_the_syntax_check_catches_a_broken_statement() -> None:
    assert syntax_errors("$Env:PATH = 'a' +\n")
    assert syntax_errors("if ($x) { $Env:A = 'b'\n")


values = st.text(st.characters(blacklist_characters="\x00"), max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,6}\Z"), st.one_of(st.none(), values), max_size=5
    )
)
def test_powershell_output_is_two_statement_forms_that_decode_to_the_values(
    changes: dict[str, str | None],
) -> None:
    env = dict.fromkeys(changes, "old")
    text = core.emit_powershell(changes, env)
    assert text.isascii()
    assert not text or not syntax_errors(text)
    seen: dict[str, str | None] = {}
    for line in text.splitlines():
        unset, assign = UNSET.match(line), SET.match(line)
        assert unset or assign, line
        if unset:
            seen[unset[1]] = None
        elif assign:
            seen[assign[1]] = decode(assign[2])
    # PowerShell has no empty environment variables: "" is written as a removal
    assert seen == {k: (v or None) for k, v in changes.items()}


def test_a_name_that_is_not_an_identifier_is_refused() -> None:
    with pytest.raises(core.Refused):
        core.emit_powershell({"A;Remove-Item x": "1"}, {})


# --- conda's own PowerShell activator, its lines applied in its order -----------------------

CONDA_REAL = Path(__file__).parent / "shells" / "conda_real.py"
CONDA_SET = re.compile(r'\$Env:([A-Za-z_][A-Za-z0-9_]*) = "([^"`$]*)"\Z')
CONDA_RUN = re.compile(r'\. "(.*)"\Z')


def apply_powershell(env: dict[str, str], text: str, forms: list[re.Pattern[str]]) -> None:
    """Apply lines of the given statement forms; anything else fails the test."""
    for line in text.splitlines():
        for form in forms:
            match = form.match(line)
            if match:
                break
        else:
            raise AssertionError(f"a line of no known form: {line!r}")
        name = match[1]
        value = "" if form is UNSET else decode(match[2]) if form is SET else match[2]
        if not value:  # PowerShell: "" and $null remove the variable
            env.pop(name, None)
        else:
            env[name] = value


def run_conda(env: dict[str, str], *args: str) -> None:
    """``conda ...`` in PowerShell: conda's PowerShellActivator builds the lines from ``env``;
    each ``. "script.ps1"`` is the stub: the core's PowerShell output for that script."""
    proc = subprocess.run(
        [sys.executable, str(CONDA_REAL), "powershell", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    for line in proc.stdout.splitlines():
        script = CONDA_RUN.match(line)
        if script is None:
            apply_powershell(env, line, [CONDA_SET])
            continue
        path = Path(script[1])
        prefix, phase = path.parents[3], path.parent.name.removesuffix(".d")
        combo = path.stem.removeprefix("envfactory-")
        plan_file = prefix / "etc/conda/envfactory" / f"envfactory-{combo}.json"
        plan = json.loads(plan_file.read_text(encoding="utf-8"))
        if phase == "activate":
            changes = core.activate(env, plan, os.path.isdir)
        else:
            changes = core.deactivate(env, plan)
        apply_powershell(env, core.emit_powershell(changes, env), [SET, UNSET])


@pytest.mark.slow
@pytest.mark.parametrize("stack", [False, True], ids=["switch", "stack"])
def test_conda_powershell_activator_switch_cycle_is_exact(stack: bool, tmp_path: Path) -> None:
    """conda 24.7's PowerShellActivator (on Linux paths: its ':'-joined PATH) drives A, B
    (switch or --stack), deactivate, deactivate; its lines and the core's PowerShell lines are
    applied by the two forms' decoder above, not by PowerShell (none runs here)."""
    for key, name in (("A", "tf114-cuda100"), ("B", "tf210-cuda112")):
        prefix = tmp_path / f"env{key}"
        install_activation(prefix, load_catalog().combo(name), "linux-64")
        (prefix / "conda-meta").mkdir()
        for phase in ("activate", "deactivate"):  # conda looks for *.ps1
            stub = prefix / f"etc/conda/{phase}.d/envfactory-{name}.ps1"
            stub.write_text("# the core's PowerShell output is applied by the test\n")
    condabin = str(Path(sys.prefix) / "condabin")
    start = {
        "PATH": f"{condabin}:/usr/local/cuda/bin:/opt/tools/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    }
    env = dict(start)
    run_conda(env, "activate", str(tmp_path / "envA"))
    assert env["PATH"] == f"{tmp_path}/envA/bin:{condabin}:/opt/tools/bin:/usr/bin:/bin"
    run_conda(env, "activate", *(["--stack"] if stack else []), str(tmp_path / "envB"))
    assert "/usr/local/cuda/bin" not in env["PATH"]
    run_conda(env, "deactivate")
    run_conda(env, "deactivate")
    assert env["PATH"] == start["PATH"]
    assert {k: v for k, v in env.items() if k.startswith(("LD_", "CUDA", "TF_", "_ENVF"))} == {
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"
    }
