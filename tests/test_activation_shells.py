"""The activation stubs in real shells: bash, zsh, dash, fish, tcsh and xonsh source them, the
environment's Python (here: the host's, linked as <prefix>/bin/python) runs the core, and
``env -0`` reads the result. Hostile values, both conda orders, stacking, switching. Each shell
must end where the core (envfactory/activation/core.py) says, byte for byte; and each shell's
emitter is held to its shell with hypothesis on arbitrary Unicode names and values."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shells import conda_sim
from shells.harness import (
    SCRIPT_EXT,
    UNIX_SHELLS,
    Snap,
    Source,
    Step,
    relevant,
    run_session,
    run_session_stderr,
    shell_env,
)
from test_activation_core import apply, entry

from envfactory.activation import core
from envfactory.activation.plan import install_activation, plan_for
from envfactory.catalog.loader import load_catalog

pytestmark = pytest.mark.shell
COMBO = "tf114-cuda100"
HOSTILE_DIR = "/tmp/we ird (x86)/a&b%c%!d\"e'f;g é\\h $HOME `x`"


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two environment prefixes with envfactory's scripts (TF1 and TF2) and one foreign env."""
    root = tmp_path_factory.mktemp("envs")
    out = {}
    for key, name in (("A", COMBO), ("B", "tf210-cuda112")):
        prefix = root / f"env {key} (x)"
        install_activation(prefix, load_catalog().combo(name), "linux-64")
        (prefix / "conda-meta").mkdir()
        link_python(prefix)
        out[key] = prefix
    foreign = root / "other env"
    (foreign / "conda-meta").mkdir(parents=True)
    out["foreign"] = foreign
    return out


def link_python(prefix: Path) -> None:
    """The environment's own Python, as conda's python package installs it (bin/python)."""
    (prefix / "bin").mkdir(exist_ok=True)
    (prefix / "bin" / "python").symlink_to(Path(sys.executable).resolve())


def script(prefix: Path, phase: str, shell: str) -> Path:
    found = sorted((prefix / f"etc/conda/{phase}.d").glob(f"envfactory-*.{SCRIPT_EXT[shell]}"))
    assert len(found) == 1, found
    return found[0]


def shell_runner(shell: str, workdir: Path) -> Any:
    counter = [0]

    def run(prefix: str, phase: str, env: dict[str, str]) -> dict[str, str]:
        counter[0] += 1
        steps: list[Step] = [Source(script(Path(prefix), phase, shell)), Snap()]
        return run_session(shell, steps, env, workdir / str(counter[0]))[0]

    return run


def core_is_dir(path: str) -> bool:
    return Path(path).is_dir()


@pytest.mark.parametrize("shell", UNIX_SHELLS)
def test_hostile_values_round_trip(shell: str, prefixes: dict[str, Path], tmp_path: Path) -> None:
    a = prefixes["A"]
    start = {
        "PATH": f"/usr/bin:/usr/local/cuda-10.0/bin:/bin::{HOSTILE_DIR}:/usr/local/cuda/bin/",
        "LD_LIBRARY_PATH": f"/usr/local/cuda/lib64:{prefixes['foreign']}/lib:{HOSTILE_DIR}:",
        "CUDA_PATH": "/usr/local/cuda",
        "CUDA_PATH_V10_0": "/usr/local/cuda-10.0",
        "CONDA_PREFIX": str(a),
        "CONDA_SHLVL": "1",
        # names that are not identifiers (issue 10, row 6): left alone, never printed
        "CUDA_PATH_V;touch hacked;x": "1",
        "CUDA_PATH_V$(touch hacked2)": "2",
        "CUDA_PATH_V`touch hacked3`": "3",
    }
    steps: list[Step] = [
        Snap(),
        Source(script(a, "activate", shell)),
        Snap(),
        Source(script(a, "activate", shell)),
        Snap(),
        Source(script(a, "deactivate", shell)),
        Snap(),
    ]
    before, active, twice, after = (
        relevant(s) for s in run_session(shell, steps, shell_env() | start, tmp_path)
    )
    assert active == twice  # activating twice changes nothing more
    # xonsh expands $VARS inside *PATH entries itself; compare with what the shell started with
    hostile = before["LD_LIBRARY_PATH"].split(":")[2]
    assert hostile == HOSTILE_DIR or shell == "xonsh"
    assert active["LD_LIBRARY_PATH"] == f"{a}/lib:{hostile}:"
    assert "cuda" not in active["PATH"] and "CUDA_PATH" not in active
    assert "CUDA_PATH_V10_0" not in active and active["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert after == before
    expected = apply(before, core.activate(before, plan(COMBO), core_is_dir))
    assert active == relevant(expected)  # the shell did what the core says
    assert not list(tmp_path.glob("hacked*"))
    odd = {k: v for k, v in before.items() if not k.isidentifier()}
    assert {k: v for k, v in active.items() if not k.isidentifier()} == odd


def plan(name: str) -> dict[str, Any]:
    return plan_for(load_catalog().combo(name), "linux-64").runtime()


@pytest.mark.parametrize("shell", UNIX_SHELLS)
@pytest.mark.parametrize("path", [None, ""])
def test_unset_and_empty_lists_come_back_as_they_were(
    shell: str, path: str | None, prefixes: dict[str, Path], tmp_path: Path
) -> None:
    a = prefixes["A"]
    start = {"CONDA_PREFIX": str(a), "PATH": "/usr/bin:/bin"}
    if path is not None:
        start["LD_LIBRARY_PATH"] = path
    steps: list[Step] = [Snap(), Source(script(a, "activate", shell)), Snap()]
    steps += [Source(script(a, "deactivate", shell)), Snap()]
    before, active, after = (relevant(s) for s in run_session(shell, steps, start, tmp_path))
    assert active["LD_LIBRARY_PATH"] == f"{a}/lib"
    assert after == before


@pytest.mark.slow
@pytest.mark.parametrize("shell", UNIX_SHELLS)
@pytest.mark.parametrize("switch", [False, True], ids=["conda-deactivate", "switch"])
def test_stacked_and_switched_environments(
    shell: str, switch: bool, prefixes: dict[str, Path], tmp_path: Path
) -> None:
    """TF1 env A, then TF2 env B stacked on top; the user prepends to PATH; then B is
    deactivated (conda: PATH first) or switched to A (conda: deactivate.d first); then A."""
    run = shell_runner(shell, tmp_path)
    a, b = str(prefixes["A"]), str(prefixes["B"])
    # xonsh itself expands $VARS in *PATH entries, in every process it starts
    hostile = HOSTILE_DIR.replace("$", "") if shell == "xonsh" else HOSTILE_DIR
    start = shell_env() | {
        "PATH": f"/usr/local/cuda-10.0/bin:/usr/bin:{hostile}:/bin",
        "LD_LIBRARY_PATH": f"/usr/local/cuda/lib64:{prefixes['foreign']}/lib",
        "TF_CPP_MIN_LOG_LEVEL": "0",
    }
    env = conda_sim.activate(start, a, run)
    assert env["LD_LIBRARY_PATH"] == f"{a}/lib" and env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    env = conda_sim.activate(env, b, run, stack=True)
    # B (conda route) needs no lib dir; A's lib dir is a foreign env's and leaves too
    assert "LD_LIBRARY_PATH" not in env and "cuda" not in env["PATH"]
    env["PATH"] = "/mine:" + env["PATH"]
    env = conda_sim.activate(env, a, run) if switch else conda_sim.deactivate(env, run)
    # switched: A at level 2 prepends its lib in front of level 1's own copy
    assert set(env["LD_LIBRARY_PATH"].split(":")) == {f"{a}/lib"}
    if switch:
        env = conda_sim.deactivate(env, run)
    env = conda_sim.deactivate(env, run)
    assert relevant(env) == relevant(start) | {"PATH": "/mine:" + start["PATH"]}


@pytest.mark.parametrize("shell", UNIX_SHELLS)
def test_shells_agree_with_the_reference(
    shell: str, prefixes: dict[str, Path], tmp_path: Path
) -> None:
    count = [0]
    examples = 4 if shell == "xonsh" else 12  # xonsh starts in ~0.4 s

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(entry, max_size=6), st.lists(entry, max_size=4), st.booleans())
    def check(path: list[str], ld: list[str], stacked: bool) -> None:
        count[0] += 1
        a = str(prefixes["A"])
        # the snaps need env on PATH (and tcsh mktemp)
        path_value = ":".join([*path, "/usr/bin", "/bin"])
        start = {"PATH": path_value, "LD_LIBRARY_PATH": ":".join(ld), "CONDA_PREFIX": a}
        if stacked:
            start["CONDA_SHLVL"] = "3"
        steps: list[Step] = [Snap(), Source(script(prefixes["A"], "activate", shell)), Snap()]
        steps += [Source(script(prefixes["A"], "deactivate", shell)), Snap()]
        before, active, after = (
            relevant(s) for s in run_session(shell, steps, start, tmp_path / str(count[0]))
        )
        expected = apply(before, core.activate(before, plan(COMBO), core_is_dir))
        assert active == relevant(expected)
        assert after == before

    check()


# --- each emitter against its shell: arbitrary Unicode names and values ----------------------

EMITTER = {"bash": "sh", "zsh": "sh", "dash": "sh", "fish": "fish", "tcsh": "csh"}
names = st.one_of(
    st.from_regex(r"\AUSER_[A-Za-z0-9_]{0,8}\Z"),
    st.text(min_size=1, max_size=8).map(lambda t: "USER_" + t),  # mostly not identifiers
)
values = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))


@pytest.mark.parametrize("shell", sorted(EMITTER))
def test_emitted_lines_carry_arbitrary_values_or_are_refused(shell: str, tmp_path: Path) -> None:
    """The core's emitter for ``shell`` writes every change so that the shell reads back exactly
    that value, or refuses the whole set (a name that is not an identifier, a value the shell
    cannot carry), in which case it writes nothing."""
    count = [0]

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.dictionaries(names, st.one_of(st.none(), values), min_size=1, max_size=4))
    def check(changes: dict[str, str | None]) -> None:
        count[0] += 1
        start = {"USER_GONE": "x", "PATH": "/usr/bin:/bin"}
        changes = {"USER_GONE": None, **changes}
        try:
            text = core.EMITTERS[EMITTER[shell]](changes, start)
        except core.Refused as err:
            bad_name = any(not core.valid_name(n) for n in changes)
            breaks = any("\n" in (v or "") or "\r" in (v or "") for v in changes.values())
            csh_break = shell == "tcsh" and breaks
            assert bad_name or csh_break, err
            return
        edits = tmp_path / f"edits{count[0]}"
        edits.write_bytes(text.encode("utf-8", "surrogateescape"))
        (after,) = run_session(shell, [Source(edits), Snap()], start, tmp_path / str(count[0]))
        expected = apply(start, changes)
        assert {k: v for k, v in after.items() if k.startswith("USER_")} == {
            k: v for k, v in expected.items() if k.startswith("USER_")
        }

    check()


@pytest.mark.parametrize("shell", UNIX_SHELLS)
@pytest.mark.parametrize("case", ["no-prefix", "no-python", "core-broken"])
def test_a_stub_that_cannot_activate_says_so_in_one_line_and_changes_nothing(
    shell: str, case: str, tmp_path: Path
) -> None:
    """Fail safe in every shell: without CONDA_PREFIX, without the environment's Python, or
    with an activation.py that cannot run, the stub prints one line saying why (naming the
    phase and combo) and leaves the environment as it was."""
    prefix = tmp_path / "env (x)"
    install_activation(prefix, load_catalog().combo(COMBO), "linux-64")
    (prefix / "conda-meta").mkdir()
    if case != "no-python":
        link_python(prefix)
    if case == "core-broken":
        (prefix / "etc/conda/envfactory/activation.py").write_text("def (:\n", encoding="utf-8")
    env = shell_env() | {
        "PATH": "/usr/local/cuda/bin:/usr/bin:/bin",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        "CUDA_PATH": "/usr/local/cuda",
    }
    if case != "no-prefix":
        env["CONDA_PREFIX"] = str(prefix)
    for phase in ("activate", "deactivate"):
        steps: list[Step] = [Source(script(prefix, phase, shell)), Snap()]
        (after,), stderr = run_session_stderr(shell, steps, env, tmp_path / f"{phase}-run")
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("envfactory: "), stderr
        assert f"{phase} of {COMBO} changed nothing" in lines[0]
        assert relevant(after) == relevant(env)
