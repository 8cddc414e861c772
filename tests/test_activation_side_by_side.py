"""Side by side (issue 4, item 6): a TF1 and a TF2 environment created from locks against the
test channel, then activated, deactivated and switched in one process of each shell, the way
conda does it. After every step only the active environment's directories are on PATH and
LD_LIBRARY_PATH, no foreign CUDA toolkit is, and TF_CPP_MIN_LOG_LEVEL and CUDA_PATH are what the
active combo's plan says; after each deactivate the environment is the starting one, byte for
byte."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

import pytest
from factories import created_env
from shells.conda_steps import CondaSim
from shells.harness import SCRIPT_EXT, UNIX_SHELLS, Snap, Step, run_session, shell_env
from test_activation_shells import link_python

from envfactory.activation.plan import (
    CARRY,
    STATE_PREFIX,
    ActivationPlan,
    Shell,
    is_foreign_cuda,
    plan_for,
    script_relpath,
)
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import Combo, Platform

pytestmark = pytest.mark.slow  # two environments locked and created, then six shells

PLATFORM: Platform = "linux-64"
TF1, TF2 = "tf114-cuda100", "tf210-cuda112"
VENDOR = "/opt/Vendor Tools"  # a directory with a space, which must stay where it is
# A machine with NVIDIA's CUDA 10.1 installed the way its Linux guide says, plus a profile that
# adds the /usr/local/cuda symlink too; conda's shell hook has set CONDA_SHLVL=0.
START = {
    "PATH": (
        f"/usr/local/cuda-10.1/bin:/usr/local/bin:/usr/bin:/bin:{VENDOR}/bin:/usr/local/cuda/bin"
    ),
    "LD_LIBRARY_PATH": f"/usr/local/cuda/lib64:{VENDOR}/lib",
    "CUDA_PATH": "/usr/local/cuda-10.1",
    "CONDA_SHLVL": "0",
}
# What activation (conda's part and envfactory's) may change while an environment is active.
TOUCHED = ("PATH", "LD_LIBRARY_PATH", "TF_CPP_MIN_LOG_LEVEL", "CONDA_PREFIX", "CONDA_SHLVL")
TOUCHED_PREFIXES = (STATE_PREFIX, "CUDA_PATH")


@dataclass(frozen=True)
class Env:
    prefix: Path
    combo: Combo
    plan: ActivationPlan

    def script(self, phase: Literal["activate", "deactivate"], shell: str) -> Path:
        ext = cast("Shell", SCRIPT_EXT[shell])
        return self.prefix / script_relpath(self.combo.name, phase, ext)


@pytest.fixture(scope="module")
def envs(
    test_channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Env]:
    """Both environments, locked and created by envfactory's own functions (prefixes with a
    space, as under a user's "My Projects" folder)."""
    root = tmp_path_factory.mktemp("side by side")
    out = {}
    for name in (TF1, TF2):
        combo = load_catalog().combo(name)
        prefix = created_env(test_channels, name, PLATFORM, root)
        # the test channel's python is a stub without an interpreter: the host's stands in
        (prefix / "bin" / "python").unlink(missing_ok=True)
        link_python(prefix)
        out[name] = Env(prefix, combo, plan_for(combo, PLATFORM))
    return out


def entries(env: dict[str, str], name: str) -> list[str]:
    return env[name].split(":") if name in env else []


def foreign(entry: str, plan: ActivationPlan) -> bool:
    return is_foreign_cuda(entry, plan.os)


def planned(active: Env, variable: str) -> list[str]:
    """The directories the plan puts first in ``variable``, resolved against the prefix."""
    (edit,) = [e for e in active.plan.lists if e.variable == variable]
    return [f"{active.prefix}/{v.text}" if v.in_prefix else v.text for v in edit.prepend]


def untouched(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in TOUCHED and not k.startswith(TOUCHED_PREFIXES)}


def check_active(
    step: str, env: dict[str, str], start: dict[str, str], active: Env, other: Env
) -> None:
    where = f"after {step}"
    plan = active.plan
    # PATH: conda's block, then the plan's directories, then the user's entries minus foreign CUDA
    for variable, conda_block in (("PATH", [f"{active.prefix}/bin"]), ("LD_LIBRARY_PATH", [])):
        found = entries(env, variable)
        for entry in found:
            assert not entry.startswith(str(other.prefix)), (
                f"{where}: {other.combo.name} in {variable}: {entry}"
            )
            assert not foreign(entry, plan), f"{where}: foreign CUDA in {variable}: {entry}"
        ours = [e for e in found if e.startswith(str(active.prefix))]
        assert ours == conda_block + planned(active, variable), f"{where}: {variable} = {found}"
        kept = [e for e in entries(start, variable) if not foreign(e, plan)]
        assert found == conda_block + planned(active, variable) + kept, f"{where}: {variable}"
    assert env.get("TF_CPP_MIN_LOG_LEVEL") == str(active.combo.tf_cpp_min_log_level), where
    cuda = {k: v for k, v in env.items() if k.startswith(("CUDA_PATH", *plan.unset_prefixes))}
    expected_cuda = {
        name: f"{active.prefix}/{v.text}" if v.in_prefix else v.text
        for name, v in plan.set_vars
        if name.startswith("CUDA_PATH")
    }
    assert cuda == expected_cuda, f"{where}: CUDA variables {cuda}"
    assert (env["CONDA_PREFIX"], env["CONDA_SHLVL"]) == (str(active.prefix), "1"), where
    assert untouched(env) == untouched(start), f"{where}: activation changed other variables"


@pytest.mark.shell
@pytest.mark.parametrize("shell", UNIX_SHELLS)
def test_tf1_and_tf2_side_by_side(shell: str, envs: dict[str, Env], tmp_path: Path) -> None:
    tf1, tf2 = envs[TF1], envs[TF2]
    conda = CondaSim(shell, tmp_path / "conda")
    steps: list[Step] = [Snap()]
    steps += [*conda.activate(tf1.prefix, tf1.script("activate", shell)), Snap()]
    steps += [*conda.deactivate(tf1.prefix, tf1.script("deactivate", shell)), Snap()]
    steps += [*conda.activate(tf2.prefix, tf2.script("activate", shell)), Snap()]
    steps += [
        *conda.switch(
            tf2.prefix,
            tf2.script("deactivate", shell),
            tf1.prefix,
            tf1.script("activate", shell),
            between=[Snap()],
        ),
        Snap(),
    ]
    steps += [*conda.deactivate(tf1.prefix, tf1.script("deactivate", shell)), Snap()]
    start, on_tf1, off, on_tf2, mid_switch, switched, end = run_session(
        shell, steps, shell_env() | START, tmp_path / "session"
    )
    assert start["PATH"] == START["PATH"] and "TF_CPP_MIN_LOG_LEVEL" not in start
    check_active("activate TF1", on_tf1, start, tf1, tf2)
    assert off == start, "after deactivate TF1: not the starting environment"
    check_active("activate TF2", on_tf2, start, tf2, tf1)
    # conda's switch order: TF2's deactivate.d has run while PATH still holds TF2's block;
    # conda exports the PATH it computed before, so the script leaves PATH's undo to the next
    # activation (_ENVFACTORY_CARRY) and puts everything else back
    assert mid_switch["PATH"] == on_tf2["PATH"] and CARRY in mid_switch
    rest = {k: v for k, v in mid_switch.items() if k not in ("PATH", CARRY)}
    conda_only = {"CONDA_PREFIX": str(tf2.prefix), "CONDA_SHLVL": "1"}
    assert rest | {"PATH": start["PATH"]} == start | conda_only, "TF2's deactivate.d on a switch"
    check_active("switch TF2 -> TF1", switched, start, tf1, tf2)
    assert end == start, "after the last deactivate: not the starting environment"
