"""Exact undo under conda's *real* activator (issue 12, item 5). conda 24.7's own activator
classes (vendored in conda-lock: PosixActivator, CshActivator, FishActivator, XonshActivator)
build the commands for ``conda activate A``, ``conda activate B`` (a switch: conda runs A's
deactivate.d, then exports the PATH it computed *before*, then B's activate.d),
``conda deactivate`` twice, and each shell evaluates them as conda's shell hooks do; the
envfactory stubs run inside. With the activation scripts of main before this change, bash
ended without /usr/local/cuda/bin on PATH; now every shell ends where it started."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from shells.harness import SCRIPT_EXT, UNIX_SHELLS, Snap, Source, Step, run_session, shell_env
from test_activation_shells import link_python

from envfactory.activation import shellquote
from envfactory.activation.plan import install_activation
from envfactory.catalog.loader import load_catalog

pytestmark = [pytest.mark.shell, pytest.mark.slow]
CONDA_REAL = Path(__file__).parent / "shells" / "conda_real.py"  # run, never imported here
CONDABIN = str(Path(sys.prefix) / "condabin")  # conda adds it on the first activation
START = {
    "PATH": f"{CONDABIN}:/usr/local/cuda/bin:/opt/tools/bin:/usr/bin:/bin",
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "CUDA_PATH": "/usr/local/cuda",
}
WATCHED = ("PATH", "LD_LIBRARY_PATH", "TF_CPP_MIN_LOG_LEVEL")
ACTIVATOR = {"bash": "posix", "zsh": "posix", "dash": "posix", "tcsh": "csh", "fish": "fish"}
ACTIVATOR |= {"xonsh": "xonsh"}


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("conda")
    out = {}
    for key, name in (("A", "tf114-cuda100"), ("B", "tf210-cuda112")):
        prefix = root / "envs" / f"env{key}"  # conda's xonsh source-bash breaks on a space
        install_activation(prefix, load_catalog().combo(name), "linux-64")
        (prefix / "conda-meta").mkdir()
        link_python(prefix)
        out[key] = prefix
    return out


class Conda:
    """``conda ...`` in one shell: a snippet that evaluates what conda's activator prints."""

    def __init__(self, shell: str, workdir: Path) -> None:
        self.shell, self.workdir, self.count = shell, workdir, 0
        workdir.mkdir(parents=True, exist_ok=True)

    def __call__(self, *args: str) -> Source:
        argv = [sys.executable, str(CONDA_REAL), ACTIVATOR[self.shell], *args]
        if self.shell in ("bash", "zsh", "dash"):
            line = f'eval "$({" ".join(shellquote.sh(a) for a in argv)})"'
        elif self.shell == "tcsh":  # conda.csh: eval "`$_CONDA_EXE shell.csh activate ...`"
            line = f'eval "`{" ".join(shellquote.csh(a) for a in argv)}`"'
        elif self.shell == "fish":  # conda.fish: ... | source
            line = f"{' '.join(shellquote.fish(a) for a in argv)} | source"
        else:  # conda.xsh: execx of the output (not $(...), which exports a variable of its own)
            run = "__import__('subprocess').run"
            line = (
                f"execx({run}({shellquote.xonsh(argv)}, env=${{...}}.detype(), "
                "capture_output=True, text=True, check=True).stdout)"
            )
        self.count += 1
        snippet = self.workdir / f"conda-{self.count}.{SCRIPT_EXT[self.shell]}"
        snippet.write_text(line + "\n", encoding="utf-8")
        return Source(snippet)


def watched(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in WATCHED or k.startswith(("CUDA_", "_ENVF"))}


@pytest.mark.parametrize("stack", [False, True], ids=["switch", "stack"])
@pytest.mark.parametrize("shell", UNIX_SHELLS)
def test_activate_a_then_b_then_deactivate_twice_gives_the_start_back(
    shell: str, stack: bool, prefixes: dict[str, Path], tmp_path: Path
) -> None:
    a, b = prefixes["A"], prefixes["B"]
    conda = Conda(shell, tmp_path / "conda")
    second = ["activate", "--stack", str(b)] if stack else ["activate", str(b)]
    steps: list[Step] = [Snap(), conda("activate", str(a)), Snap(), conda(*second), Snap()]
    steps += [conda("deactivate"), Snap(), conda("deactivate"), Snap()]
    start, on_a, on_b, back_on_a, end = run_session(
        shell, steps, shell_env() | START, tmp_path / "session"
    )
    assert start["PATH"] == START["PATH"]
    rest = "/opt/tools/bin:/usr/bin:/bin"
    assert on_a["PATH"] == f"{a}/bin:{CONDABIN}:{rest}"
    assert on_a["LD_LIBRARY_PATH"] == f"{a}/lib" and "CUDA_PATH" not in on_a
    assert on_a["TF_CPP_MIN_LOG_LEVEL"] == "2"
    if stack:
        assert on_b["PATH"] == f"{b}/bin:{a}/bin:{CONDABIN}:{rest}"
    else:
        assert on_b["PATH"] == f"{b}/bin:{CONDABIN}:{rest}"
    assert "LD_LIBRARY_PATH" not in on_b  # B needs no lib dir; A's is another env's
    assert watched(back_on_a) == watched(on_a) | {
        k: v for k, v in watched(back_on_a).items() if k.startswith("_ENVF")
    }
    assert watched(end) == watched(start)
    assert end["PATH"] == START["PATH"]  # /usr/local/cuda/bin back, in its place
