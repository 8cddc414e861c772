"""The activation scripts in real shells: bash, zsh, dash, fish, tcsh and xonsh source them and
``env -0`` reads the result. Hostile values, both conda orders, stacking, switching, and two
environments created from locks side by side. Each shell must agree with the reference
(envfactory_core.py) byte for byte."""

from __future__ import annotations

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
    shell_env,
)
from test_activation_core import CORE, apply, entry

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
        out[key] = prefix
    foreign = root / "other env"
    (foreign / "conda-meta").mkdir(parents=True)
    out["foreign"] = foreign
    return out


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
    expected = apply(before, CORE["envfactory_activate"](before, plan(COMBO), core_is_dir))
    assert active == relevant(expected)  # the shell did what the reference does


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
        # the scripts need awk and env on PATH
        path_value = ":".join([*path, "/usr/bin", "/bin"])
        start = {"PATH": path_value, "LD_LIBRARY_PATH": ":".join(ld), "CONDA_PREFIX": a}
        if stacked:
            start["CONDA_SHLVL"] = "3"
        steps: list[Step] = [Snap(), Source(script(prefixes["A"], "activate", shell)), Snap()]
        steps += [Source(script(prefixes["A"], "deactivate", shell)), Snap()]
        before, active, after = (
            relevant(s) for s in run_session(shell, steps, start, tmp_path / str(count[0]))
        )
        expected = apply(before, CORE["envfactory_activate"](before, plan(COMBO), core_is_dir))
        assert active == relevant(expected)
        assert after == before

    check()
