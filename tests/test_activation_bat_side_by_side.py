"""Side by side in cmd (issue 4, item 6, the Windows side): win-64 environments locked and
created by envfactory's own functions against the test channel, each given a real Windows
CPython as its python.exe (tests/shells/winpython.py), then activated, deactivated and switched
in one wine cmd session by conda 24.7's own ``CmdExeActivator`` (tests/shells/conda_win.py: a
switch runs TF2's deactivate.d first and sets the PATH it computed before; deactivating after
the switch goes back to TF2 and runs its activate.d again). Every script is the real chain:
the .bat stub, the prefix's python.exe, activation.py, the temporary .bat it CALLs. After every
step only the active environment's directories are on PATH, no foreign CUDA toolkit is,
TF_CPP_MIN_LOG_LEVEL and CUDA_PATH are what the plan says; after the last deactivate the
environment is the starting one.

The two environments are a TF1 prefix (tf114-cuda100, defaults: CUDA 10.0 from conda, the TF
1.14 wheel) and a TF2 prefix (tf23-cuda101, conda-forge CUDA 10.1 + cuDNN 7.6.5.32 and the TF
2.3.0 wheel), both created from their win-64 locks. Both combos set TF_CPP_MIN_LOG_LEVEL=2, so
the switch checks that the other prefix's directories and CUDA_PATH leave.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from factories import created_env
from shells import winpython
from shells.conda_win import CondaCmd
from shells.harness import Snap, Step
from shells.wine import WinePrefix, run_cmd_sessions, win_path
from test_activation_conda_cmd import conda_block

from envfactory.activation.plan import (
    STATE_PREFIX,
    ActivationPlan,
    is_foreign_cuda,
    plan_for,
    script_relpath,
)
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import Combo, Platform

pytestmark = [pytest.mark.wine, pytest.mark.network]

PLATFORM: Platform = "win-64"
TF1 = "tf114-cuda100"
TF2 = "tf23-cuda101"
NVIDIA = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v10.1"
# NVIDIA's CUDA 10.1 installer, TensorFlow's old guide (C:\tools\cuda\bin), a (x86) entry;
# conda's hook has set CONDA_SHLVL=0; conda's condabin comes first (the test puts it there:
# conda adds it on a first activation otherwise, and it stays).
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
CONDAS_OWN = ("CONDA_DEFAULT_ENV", "CONDA_PROMPT_MODIFIER", "CONDA_EXE", "CONDA_PYTHON_EXE", "_CE_")


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
def envs(test_channels: dict[str, Path], root: Path, windows_python: Path) -> dict[str, Env]:
    """The win-64 locks of tf114-cuda100 and tf23-cuda101, each created (prefixes with a
    space)."""
    out = {}
    for name in (TF1, TF2):
        combo = load_catalog().combo(name)
        prefix = created_env(test_channels, name, PLATFORM, root)
        assert (prefix / "conda-meta").is_dir() and (prefix / "python.exe").is_file()
        winpython.install(windows_python, prefix)  # the test channel's python.exe is a stub
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
def conda_python(root: Path, windows_python: Path) -> Path:
    vendor = winpython.conda_vendor(root / "conda-vendor")
    return winpython.conda_python(windows_python, root / "conda-python", win_path(vendor))


def entries(env: dict[str, str]) -> list[str]:
    return env["PATH"].split(";") if env.get("PATH") else []


def foreign(entry: str, plan: ActivationPlan) -> bool:
    return is_foreign_cuda(entry, plan.os)


def untouched(env: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if k.upper() not in TOUCHED
        and not k.upper().startswith((STATE_PREFIX, "CUDA_PATH", "CONDA_PREFIX_", *CONDAS_OWN))
    }


def check_active(
    step: str, env: dict[str, str], start: dict[str, str], active: Env, other: Env, level: str
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
    assert ours == planned + conda_block(active.win), f"{where}: PATH = {found}"
    kept = [e for e in entries(start) if not foreign(e, plan)]
    assert found == planned + conda_block(active.win) + kept, f"{where}: PATH = {found}"
    assert env.get("TF_CPP_MIN_LOG_LEVEL") == str(active.combo.tf_cpp_min_log_level), where
    cuda = {k: v for k, v in env.items() if k.upper().startswith("CUDA_PATH")}
    expected_cuda = {
        name: f"{active.win}\\{v.text}" if v.in_prefix else v.text
        for name, v in plan.set_vars
        if name.startswith("CUDA_PATH")
    }
    assert expected_cuda == {"CUDA_PATH": active.win + r"\Library"}, where
    assert cuda == expected_cuda, f"{where}: CUDA variables {cuda}"
    assert (env["CONDA_PREFIX"], env["CONDA_SHLVL"]) == (active.win, level), where
    assert untouched(env) == untouched(start), f"{where}: activation changed other variables"


def test_tf1_tf2_side_by_side_in_cmd(
    envs: dict[str, Env], wine: WinePrefix, root: Path, conda_python: Path
) -> None:
    tf1, tf2 = envs[TF1], envs[TF2]
    conda = CondaCmd(conda_python, root / "conda")
    condabin = win_path(conda_python.parent / "condabin")
    begin = START | {"PATH": condabin + ";" + START["PATH"]}
    steps: list[Step] = [Snap(), conda("activate", tf1.win), Snap(), conda("deactivate"), Snap()]
    steps += [conda("activate", tf2.win), Snap(), conda("activate", tf1.win), Snap()]
    steps += [conda("deactivate"), Snap(), conda("deactivate"), Snap()]
    (result,), stderr = run_cmd_sessions(wine, [(steps, begin)], root / "session")
    assert set(result.codes) == {0}, f"a step failed: {result.codes}\n{stderr}"
    assert set(result.errors) == {""}, result.errors
    start, on_tf1, off, on_tf2, switched, back_on_tf2, end = result.snaps
    assert {k: start.get(k) for k in begin} == begin, "the driver did not set the start"
    assert "TF_CPP_MIN_LOG_LEVEL" not in start and "CONDA_PREFIX" not in start
    check_active("activate TF1", on_tf1, start, tf1, tf2, "1")
    conda_exe = {k: off[k] for k in ("CONDA_EXE", "CONDA_PYTHON_EXE")}
    assert off | {"CONDA_SHLVL": "0"} == start | {"CONDA_SHLVL": "0"} | conda_exe, "TF1 off"
    check_active("activate TF2", on_tf2, start, tf2, tf1, "1")
    # conda's switch order: TF2's deactivate.d ran while PATH still held TF2's block and
    # conda then set the PATH it computed before; the PATH undo TF2's script left for the next
    # activation (_ENVFACTORY_CARRY) was applied by TF1's, which removed the entries again
    check_active("switch TF2 -> TF1", switched, start, tf1, tf2, "2")
    check_active("deactivate: back to TF2", back_on_tf2, start, tf2, tf1, "1")
    # conda leaves CONDA_EXE and CONDA_PYTHON_EXE set (its own, not the environments')
    assert end | {"CONDA_SHLVL": "0"} == start | {"CONDA_SHLVL": "0"} | conda_exe, "not the start"
    assert end["PATH"] == begin["PATH"]
