"""Exact undo under conda's *real* cmd activator (issue 12, item 5, the Windows side). conda 24.7's
own ``CmdExeActivator`` (vendored in conda-lock), run by a real Windows CPython under wine
(tests/shells/winpython.py, tests/shells/conda_win.py), builds the commands of
``conda activate A``, ``conda activate B`` (a switch: conda runs A's deactivate.d, then sets the
PATH it computed *before*, then B's activate.d; or ``--stack``), ``conda deactivate`` twice;
wine's cmd CALLs them as conda's ``_conda_activate.bat`` does, and they CALL the envfactory
stubs, which run ``<prefix>\\python.exe`` on the core. Starting from a PATH with NVIDIA's CUDA
toolkit and tools directories, every cycle ends on the starting PATH, exactly, with
TF_CPP_MIN_LOG_LEVEL and CUDA_PATH back."""

from __future__ import annotations

from pathlib import Path

import pytest
from shells import winpython
from shells.conda_win import CondaCmd
from shells.harness import Snap, Source, Step
from shells.wine import WinePrefix, run_cmd_sessions, win_path

from envfactory.activation.plan import CORE_RELPATH, install_activation
from envfactory.catalog.loader import load_catalog

pytestmark = [pytest.mark.wine, pytest.mark.network]

CUDA = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v10.0"
WATCHED = ("PATH", "TF_CPP_MIN_LOG_LEVEL", "CONDA_SHLVL", "CONDA_PREFIX")


def conda_block(prefix: str) -> list[str]:
    """conda 24.7's PATH directories of a Windows prefix (conda/activate.py, _get_path_dirs)."""
    leaves = ("", r"\Library\mingw-w64\bin", r"\Library\usr\bin", r"\Library\bin")
    return [prefix + leaf for leaf in (*leaves, r"\Scripts", r"\bin")]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conda cmd")


@pytest.fixture(scope="module")
def prefixes(root: Path, windows_python: Path) -> dict[str, Path]:
    out = {}
    for key, name in (("A", "tf114-cuda100"), ("B", "tf210-cuda112")):
        prefix = root / "envs" / f"env {key}"
        install_activation(prefix, load_catalog().combo(name), "win-64")
        (prefix / "conda-meta").mkdir()
        winpython.install(windows_python, prefix)
        out[key] = prefix
    return out


@pytest.fixture(scope="module")
def conda_python(root: Path, windows_python: Path) -> Path:
    vendor = winpython.conda_vendor(root / "conda-vendor")
    return winpython.conda_python(windows_python, root / "conda-python", win_path(vendor))


def watched(env: dict[str, str]) -> dict[str, str]:
    return {
        k: v for k, v in env.items() if k.upper() in WATCHED or k.upper().startswith("CUDA_PATH")
    }


@pytest.mark.parametrize("stack", [False, True], ids=["switch", "stack"])
def test_conda_cmd_activator_a_then_b_then_deactivate_twice_gives_the_start_back(
    stack: bool, prefixes: dict[str, Path], conda_python: Path, wine: WinePrefix, root: Path
) -> None:
    a, b = win_path(prefixes["A"]), win_path(prefixes["B"])
    condabin = win_path(conda_python.parent / "condabin")  # conda adds it on a first activation
    rest = [r"C:\tools\bin", r"C:\Program Files (x86)\Tools", r"C:\windows\system32", r"C:\windows"]
    start = {
        "PATH": ";".join([condabin, CUDA + r"\bin", CUDA + r"\libnvvp", *rest]),
        "CUDA_PATH": CUDA,
        "CUDA_PATH_V10_0": CUDA,
        "TF_CPP_MIN_LOG_LEVEL": "1",
    }
    name = "stack" if stack else "switch"
    conda = CondaCmd(conda_python, root / name / "conda")
    second = ("activate", "--stack", b) if stack else ("activate", b)
    steps: list[Step] = [Snap(), conda("activate", a), Snap(), conda(*second), Snap()]
    steps += [conda("deactivate"), Snap(), conda("deactivate"), Snap()]
    (result,), stderr = run_cmd_sessions(wine, [(steps, start)], root / name / "session")
    assert result.codes == [0] * 4, f"{result.codes}: {result.errors}\n{stderr}"
    assert result.errors == [""] * 4
    begin, on_a, on_b, back_on_a, end = map(watched, result.snaps)
    assert begin == start
    assert on_a["PATH"].split(";") == [a + r"\Library\bin", *conda_block(a), condabin, *rest]
    assert on_a["CUDA_PATH"] == a + r"\Library" and "CUDA_PATH_V10_0" not in on_a
    assert on_a["TF_CPP_MIN_LOG_LEVEL"] == "2"
    b_path = [b + r"\Library\bin", *conda_block(b)]
    # stacked: A's block stays, but for its Library\bin (another environment's library directory)
    a_block = [d for d in conda_block(a) if d != a + r"\Library\bin"] if stack else []
    assert on_b["PATH"].split(";") == [*b_path, *a_block, condabin, *rest]
    assert on_b["CUDA_PATH"] == b + r"\Library"
    assert back_on_a == on_a
    assert end == start | {"CONDA_SHLVL": "0"}  # the NVIDIA directories back, in their place
    assert not any(k.upper().startswith("_ENVFACTORY_") for k in result.snaps[-1])
    # the Windows Python 3.8 imported the core: its compiled form is cached next to it
    for prefix in prefixes.values():
        cached = prefix / Path(CORE_RELPATH).parent / "__pycache__" / "activation.cpython-38.pyc"
        assert cached.is_file()


# What conda's own `@SET "PATH=..."` lines can carry: no `%` (cmd expands it when it CALLs
# conda's .bat), no `"` (it ends conda's quoted assignment), and only entries that
# os.path.normpath keeps as they are (its cmd activator's path_conversion: an empty entry
# becomes ".", a trailing backslash goes); the core keeps them all (tests/test_activation_bat.py).
HOSTILE = [
    r"C:\windows\system32",
    CUDA + r"\bin",
    r"c:\TOOLS\cuda\bin",
    r"C:\Program Files (x86)\Common Files\Intel",
    r"C:\a&b|c<d>e",
    r"C:\q!PATH!r",
    r"C:\c^d^^",
    r"C:\windows\system32",
]
MINE = r"C:\mine & yours"


@pytest.mark.parametrize("switch", [False, True], ids=["stack", "stack_then_switch"])
def test_user_edits_and_hostile_entries_survive_conda_stacking_and_switching(
    switch: bool, prefixes: dict[str, Path], conda_python: Path, wine: WinePrefix, root: Path
) -> None:
    """A, then B stacked, the user's own PATH edit, (then ``conda activate A``: conda 24.7 does
    not switch in place but goes to level 3, B's block replaced by A's,) deactivate down to
    level 0: the start, with the user's edit kept."""
    a, b = win_path(prefixes["A"]), win_path(prefixes["B"])
    other = root / "other"
    (other / "conda-meta").mkdir(parents=True, exist_ok=True)
    condabin = win_path(conda_python.parent / "condabin")
    path = ";".join([condabin, *HOSTILE, win_path(other) + r"\Library\bin"])
    start = {"PATH": path, "CUDA_PATH": CUDA, "USER_KEEP": "x"}
    name = "edits-switch" if switch else "edits"
    conda = CondaCmd(conda_python, root / name / "conda")
    edit = root / name / "edit.bat"
    edit.write_bytes(f'@set "PATH={MINE};%PATH%"\r\n'.encode("ascii"))
    steps: list[Step] = [Snap(), conda("activate", a), conda("activate", "--stack", b)]
    steps.append(Source(edit))
    if switch:
        steps += [conda("activate", a), Snap(), conda("deactivate")]
    steps += [conda("deactivate"), conda("deactivate"), Snap()]
    (result,), stderr = run_cmd_sessions(wine, [(steps, start)], root / name / "session")
    assert set(result.codes) == {0} and set(result.errors) == {""}, stderr
    begin, *between, end = map(watched, result.snaps)
    assert begin == watched(start)
    if switch:  # A at level 3, over B, over A
        assert (between[0]["CONDA_SHLVL"], between[0]["CONDA_PREFIX"]) == ("3", a)
    assert end["PATH"].split(";") == [MINE, *path.split(";")]
    assert end == watched(start) | {"PATH": MINE + ";" + path, "CONDA_SHLVL": "0"}
    assert result.snaps[-1]["USER_KEEP"] == "x"
