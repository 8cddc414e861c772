"""Side by side in cmd (issue 4, item 6, the Windows side): win-64 environments locked and
created by envfactory's own functions against the test channel, then activated, deactivated
and switched in one wine cmd session the way conda's cmd activator does it
(tests/shells/conda_cmd.py). After every step only the active environment's directories are on
PATH, no foreign CUDA toolkit is, TF_CPP_MIN_LOG_LEVEL and CUDA_PATH are what the plan says;
after the last deactivate the environment is the starting one, byte for byte.

The two environments are a TF1 prefix (tf114-cuda100, defaults: CUDA 10.0 from conda, the TF
1.14 wheel) and a TF2 prefix (tf23-cuda101, conda-forge CUDA 10.1 + cuDNN 7.6.5.32 and the TF
2.3.0 wheel), both created from their win-64 locks. Both combos set TF_CPP_MIN_LOG_LEVEL=2, so
the switch checks that the other prefix's directories and CUDA_PATH leave.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal

import pytest
from shells.conda_cmd import CondaCmd, block
from shells.harness import Snap, Step
from shells.wine import WinePrefix, run_cmd_sessions, win_path

from envfactory.activation.plan import (
    STATE_PREFIX,
    ActivationPlan,
    js_relpath,
    plan_for,
    script_relpath,
)
from envfactory.build.channels import ChannelMap
from envfactory.build.create import create_environment
from envfactory.build.lock import LockRequest, lock_combo
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import Combo, Platform

pytestmark = pytest.mark.wine

PLATFORM: Platform = "win-64"
TF1 = "tf114-cuda100"
TF2 = "tf23-cuda101"
NVIDIA = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v10.1"
# NVIDIA's CUDA 10.1 installer, TensorFlow's old guide (C:\tools\cuda\bin), a (x86) entry;
# conda's hook has set CONDA_SHLVL=0.
START = {
    "PATH": ";".join(
        [
            NVIDIA + r"\bin",
            NVIDIA + r"\libnvvp",
            r"C:\windows\system32",
            r"C:\Program Files (x86)\Common Files\Intel\Shared Libraries\redist\intel64\compiler",
            r"C:\tools\cuda\bin",
            r"C:\windows",
        ]
    ),
    "CUDA_PATH": NVIDIA,
    "CUDA_PATH_V10_1": NVIDIA,
    "CONDA_SHLVL": "0",
    "USER_KEEP": "x",
}
TOUCHED = ("PATH", "TF_CPP_MIN_LOG_LEVEL", "CONDA_PREFIX", "CONDA_SHLVL")


@dataclass(frozen=True)
class Env:
    prefix: Path
    combo: Combo
    plan: ActivationPlan

    @property
    def win(self) -> str:
        return win_path(self.prefix)

    def script(self, phase: Literal["activate", "deactivate"]) -> Path:
        return self.prefix / script_relpath(self.combo.name, phase, "bat")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bat side by side")


@pytest.fixture(scope="module")
def envs(test_channels: dict[str, Path], root: Path) -> dict[str, Env]:
    """The win-64 locks of tf114-cuda100 and tf23-cuda101, each created (prefixes with a
    space)."""
    channels = ChannelMap({k: test_channels[k].as_uri() for k in ("defaults", "conda-forge")})
    out = {}
    for name in (TF1, TF2):
        combo = load_catalog().combo(name)
        request = LockRequest.for_combo(
            combo, (PLATFORM,), channel_map=channels, pip_index=str(test_channels["wheels"])
        )
        lock_combo(request, root / "locks" / name)
        prefix = root / "envs" / f"{name} env"
        create_environment(root / "locks" / name / "conda-lock.yml", prefix, platform=PLATFORM)
        expected = [js_relpath(name)] + [
            script_relpath(name, phase, "bat") for phase in ("activate", "deactivate")
        ]
        missing = [path for path in expected if not (prefix / path).is_file()]
        if missing:
            pytest.fail(f"create did not install the activation scripts into {prefix}: {missing}")
        assert (prefix / "conda-meta").is_dir() and (prefix / "python.exe").is_file()
        out[name] = Env(prefix, combo, plan_for(combo, PLATFORM))
    # the two really are TF1 and TF2: their own CUDA libraries and TensorFlow wheels
    tf1, tf2 = out[TF1].prefix, out[TF2].prefix
    assert (tf1 / "Library" / "bin" / "libcudart.so.10.0.130").is_file()
    assert (tf2 / "Library" / "bin" / "cudart64_101.dll").is_file()
    assert (tf2 / "Library" / "bin" / "cudnn64_7.dll").is_file()
    assert list((tf1 / "Lib" / "site-packages").glob("tensorflow_gpu-1.14.0.dist-info"))
    assert list((tf2 / "Lib" / "site-packages").glob("tensorflow-2.3.0.dist-info"))
    return out


@pytest.fixture(scope="module")
def wine(root: Path) -> Iterator[WinePrefix]:
    prefix = WinePrefix(root / "wineprefix")
    prefix.start()  # a missing wine fails here, naming ./scripts/test
    yield prefix
    prefix.stop()


def entries(env: dict[str, str]) -> list[str]:
    return env["PATH"].split(";") if env.get("PATH") else []


def foreign(entry: str, plan: ActivationPlan) -> bool:
    probe = entry.rstrip("\\").lower()
    return any(fnmatchcase(probe, pattern.lower()) for pattern in plan.foreign_patterns)


def untouched(env: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if k.upper() not in TOUCHED and not k.upper().startswith((STATE_PREFIX, "CUDA_PATH"))
    }


def check_active(
    step: str, env: dict[str, str], start: dict[str, str], active: Env, other: Env
) -> None:
    where = f"after {step}"
    plan = active.plan
    (edit,) = plan.lists
    planned = [f"{active.win}\\{v.text}" if v.in_prefix else v.text for v in edit.prepend]
    assert planned == [active.win + r"\Library\bin"], where
    found = entries(env)
    for entry in found:
        assert not entry.lower().startswith(other.win.lower()), f"{where}: {other.win} in {entry}"
        assert not foreign(entry, plan), f"{where}: foreign CUDA on PATH: {entry}"
    ours = [e for e in found if e.lower().startswith(active.win.lower())]
    assert ours == planned + block(active.win), f"{where}: PATH = {found}"
    kept = [e for e in entries(start) if not foreign(e, plan)]
    assert found == planned + block(active.win) + kept, f"{where}: PATH = {found}"
    assert env.get("TF_CPP_MIN_LOG_LEVEL") == str(active.combo.tf_cpp_min_log_level), where
    cuda = {k: v for k, v in env.items() if k.upper().startswith("CUDA_PATH")}
    expected_cuda = {
        name: f"{active.win}\\{v.text}" if v.in_prefix else v.text
        for name, v in plan.set_vars
        if name.startswith("CUDA_PATH")
    }
    assert expected_cuda == {"CUDA_PATH": active.win + r"\Library"}, where
    assert cuda == expected_cuda, f"{where}: CUDA variables {cuda}"
    assert (env["CONDA_PREFIX"], env["CONDA_SHLVL"]) == (active.win, "1"), where
    assert untouched(env) == untouched(start), f"{where}: activation changed other variables"


def side_by_side_steps(tf1: Env, tf2: Env, workdir: Path) -> list[Step]:
    """TF1 on, off; TF2 on; switch TF2 -> TF1; off: one cmd session."""
    conda = CondaCmd(workdir)
    steps: list[Step] = [Snap()]
    steps += [*conda.activate(tf1.win, tf1.script("activate")), Snap()]
    steps += [*conda.deactivate(tf1.win, tf1.script("deactivate")), Snap()]
    steps += [*conda.activate(tf2.win, tf2.script("activate")), Snap()]
    steps += [
        *conda.switch(
            tf2.win,
            tf2.script("deactivate"),
            tf1.win,
            tf1.script("activate"),
            between=[Snap()],
        ),
        Snap(),
    ]
    steps += [*conda.deactivate(tf1.win, tf1.script("deactivate")), Snap()]
    return steps


def test_tf1_tf2_side_by_side_in_cmd(envs: dict[str, Env], wine: WinePrefix, root: Path) -> None:
    tf1, tf2 = envs[TF1], envs[TF2]
    steps = side_by_side_steps(tf1, tf2, root / "conda")
    (result,), stderr = run_cmd_sessions(wine, [(steps, START)], root / "session")
    assert set(result.codes) == {0}, f"a script failed: {result.codes}\n{stderr}"
    start, on_tf1, off, on_tf2, mid_switch, switched, end = result.snaps
    assert {k: start.get(k) for k in START} == START, "the driver did not set the start"
    assert "TF_CPP_MIN_LOG_LEVEL" not in start and "CONDA_PREFIX" not in start
    check_active("activate TF1", on_tf1, start, tf1, tf2)
    assert off == start, "after deactivate TF1: not the starting environment"
    check_active("activate TF2", on_tf2, start, tf2, tf1)
    # conda's switch order: TF2's deactivate.d has run, PATH still holds conda's block
    conda_only = {
        "PATH": ";".join([*block(tf2.win), START["PATH"]]),
        "CONDA_PREFIX": tf2.win,
        "CONDA_SHLVL": "1",
    }
    assert mid_switch == start | conda_only, "TF2's deactivate.d on a switch"
    check_active("switch TF2 -> TF1", switched, start, tf1, tf2)
    assert end == start, "after the last deactivate: not the starting environment"
