"""conda's own part of ``conda activate`` / ``conda deactivate`` as steps of a harness session.

conda exports its variables around the scripts in activate.d/deactivate.d (conda/activate.py,
``_yield_commands``; research/anchors.md): ``conda deactivate`` exports PATH without the
environment's block first, then runs deactivate.d, then drops CONDA_PREFIX and lowers
CONDA_SHLVL; activating (from nothing, or switching A -> B in place) runs A's deactivate.d
first, then exports PATH (B's block where A's was), CONDA_PREFIX and CONDA_SHLVL, then runs
B's activate.d. Here every PATH edit of conda's is one small program, ``conda-path``, whose
output each shell assigns in its own syntax, so one shell process can run a whole sequence.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from envfactory.activation import shellquote
from shells.harness import SCRIPT_EXT, SetVar, Source, Step, UnsetVar

# Reads PATH from its environment, prints it edited the way conda edits it (conda/activate.py,
# _replace_prefix_in_path: its block goes first, leaves, or takes the old block's place).
PATH_PROGRAM = f"""#!{sys.executable}
import os, sys

op, *args = sys.argv[1:]
entries = os.environ["PATH"].split(":") if os.environ.get("PATH") else []
if op == "prepend":
    entries.insert(0, args[0])
elif args[0] in entries:
    at = entries.index(args[0])
    if op == "remove":
        del entries[at]
    else:
        entries[at] = args[1]
sys.stdout.write(":".join(entries))
"""


class CondaSim:
    """Writes the per-shell snippets for one session's conda steps into ``workdir``."""

    def __init__(self, shell: str, workdir: Path) -> None:
        self.shell = shell
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.program = workdir / "conda-path"
        self.program.write_text(PATH_PROGRAM, encoding="utf-8")
        self.program.chmod(0o755)
        self.count = 0

    def _path_edit(self, *args: str) -> Source:
        argv = [str(self.program), *args]
        if self.shell in ("bash", "zsh", "dash"):
            line = f'PATH="$({" ".join(shellquote.sh(a) for a in argv)})"; export PATH'
        elif self.shell == "fish":
            line = (
                f"set -gx PATH ({' '.join(shellquote.fish(a) for a in argv)} | string split -- :)"
            )
        elif self.shell == "tcsh":
            line = f'setenv PATH "`{" ".join(shellquote.csh(a) for a in argv)}`"'
        elif self.shell == "xonsh":
            # not $(...): xonsh then exports XONSH_CAPTURE_ALWAYS, a change that is not conda's
            run = "__import__('subprocess').run"
            env = "${...}.detype()"
            line = (
                f"$PATH = {run}({shellquote.xonsh(argv)}, env={env}, capture_output=True, "
                "text=True, check=True).stdout.split(':')"
            )
        else:
            raise AssertionError(f"unknown shell {self.shell}")
        self.count += 1
        snippet = self.workdir / f"conda-{self.count}.{SCRIPT_EXT[self.shell]}"
        snippet.write_text(line + "\n", encoding="utf-8")
        return Source(snippet)

    def activate(self, prefix: Path, script: Path) -> list[Step]:
        """``conda activate prefix`` with nothing active (level 0 -> 1)."""
        return [
            self._path_edit("prepend", f"{prefix}/bin"),
            SetVar("CONDA_PREFIX", str(prefix)),
            SetVar("CONDA_SHLVL", "1"),
            Source(script),
        ]

    def deactivate(self, prefix: Path, script: Path) -> list[Step]:
        """``conda deactivate`` back to level 0: PATH first, then deactivate.d."""
        return [
            self._path_edit("remove", f"{prefix}/bin"),
            Source(script),
            UnsetVar("CONDA_PREFIX"),
            SetVar("CONDA_SHLVL", "0"),
        ]

    def switch(
        self, old: Path, old_script: Path, new: Path, new_script: Path, between: Sequence[Step] = ()
    ) -> list[Step]:
        """``conda activate new`` while ``old`` is active: deactivate.d first, then PATH;
        ``between`` runs right after old's deactivate.d."""
        return [
            Source(old_script),
            *between,
            self._path_edit("replace", f"{old}/bin", f"{new}/bin"),
            SetVar("CONDA_PREFIX", str(new)),
            SetVar("CONDA_SHLVL", "1"),
            Source(new_script),
        ]
