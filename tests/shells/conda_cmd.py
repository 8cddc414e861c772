"""conda's own part of ``conda activate`` / ``conda deactivate`` in cmd, as steps of a wine
session (tests/shells/wine.py); the cmd twin of tests/shells/conda_steps.py.

conda's cmd activator computes PATH in Python from the live PATH and ``call``s each
``etc\\conda\\activate.d\\*.bat`` after setting PATH, CONDA_PREFIX and CONDA_SHLVL; on
``conda deactivate`` it sets PATH without the environment's block first, then runs
deactivate.d; on a switch A -> B it runs A's deactivate.d first, then puts B's block where A's
was (conda/activate.py, ``_replace_prefix_in_path``: the slice from the first entry equal to
the prefix to the last of its directories found goes; paths compare case-insensitively). Here
each PATH edit is a small .bat that dumps the live environment, runs ``conda-path.js`` with
cscript on its PATH and CALLs the ``set`` line the program writes, so the edit sees what the
scripts before it really left.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from shells.harness import SetVar, Source, Step, UnsetVar
from shells.wine import win_path

# conda's _get_path_dirs(prefix) on Windows, in order.
BLOCK = ("", r"\Library\mingw-w64\bin", r"\Library\usr\bin", r"\Library\bin", r"\Scripts", r"\bin")

PATH_PROGRAM = r"""
var args = WScript.Arguments;
var op = args(0);
var fso = new ActiveXObject("Scripting.FileSystemObject");
// wine's WSH has no process environment and no StdOut: read a UTF-16 `set` dump, write a file
var dump = fso.OpenTextFile(args(args.length - 1) + ".env", 1, false, -1);
var lines = (dump.AtEndOfStream ? "" : dump.ReadAll()).split("\r\n");
dump.Close();
var path = "";
for (var n = 0; n < lines.length; n++)
    if (lines[n].substr(0, 5).toUpperCase() == "PATH=") path = lines[n].substr(5);
var entries = path ? path.split(";") : [];
var BLOCK = ["", "\\Library\\mingw-w64\\bin", "\\Library\\usr\\bin", "\\Library\\bin",
             "\\Scripts", "\\bin"];
function dirs(prefix) {
    var out = [];
    for (var i = 0; i < BLOCK.length; i++) out.push(prefix + BLOCK[i]);
    return out;
}
function indexOf(list, item) {
    for (var i = 0; i < list.length; i++)
        if (list[i].toLowerCase() == item.toLowerCase()) return i;
    return -1;
}
var first = 0, news = [];
if (op == "prepend") {
    news = dirs(args(1));
} else {
    var old = dirs(args(1));
    first = indexOf(entries, old[0]);
    if (first < 0) {
        first = 0;
    } else {
        var last = -1;
        for (var k = old.length - 1; k >= 0 && last < 0; k--) last = indexOf(entries, old[k]);
        entries.splice(first, last - first + 1);
    }
    if (op == "replace") news = dirs(args(2));
}
var out = entries.slice(0, first).concat(news, entries.slice(first)).join(";");
if (/["%\r\n]/.test(out)) {
    WScript.Echo("conda-path.js cannot write this PATH into a .bat: " + out);
    WScript.Quit(1);
}
var bat = fso.CreateTextFile(args(args.length - 1) + ".bat", false, false);
bat.Write('@set "PATH=' + out + '"\r\n');
bat.Close();
WScript.Quit(0);
"""


def block(prefix: str) -> list[str]:
    """conda's PATH block of the (Windows) prefix."""
    return [prefix + leaf for leaf in BLOCK]


class CondaCmd:
    """Writes the .bat snippets for one session's conda steps into ``workdir``; prefixes are
    Windows paths (``Z:\\...``), scripts Unix paths (the driver maps them)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.program = workdir / "conda-path.js"
        self.program.write_text(PATH_PROGRAM.replace("\n", "\r\n"), encoding="ascii")
        self.count = 0

    def _path_edit(self, *args: str) -> Source:
        self.count += 1
        snippet = self.workdir / f"conda-{self.count}.bat"
        tmp = win_path(self.workdir / f"conda-{self.count}-tmp")
        quoted = " ".join(f'"{a}"' for a in (*args, tmp))
        lines = [
            f'@"%SystemRoot%\\System32\\cmd.exe" /d /u /c set >"{tmp}.env"',
            f'@"%SystemRoot%\\System32\\cscript.exe" //nologo "{win_path(self.program)}" '
            f"{quoted} 1>&2",
            "@if errorlevel 1 exit /b 1",
            f'@call "{tmp}.bat"',
            f'@del "{tmp}.bat" "{tmp}.env"',
            "@exit /b 0",
        ]
        snippet.write_text("\r\n".join(lines) + "\r\n", encoding="ascii")
        return Source(snippet)

    def activate(self, prefix: str, script: Path) -> list[Step]:
        """``conda activate prefix`` with nothing active (level 0 -> 1)."""
        return [
            self._path_edit("prepend", prefix),
            SetVar("CONDA_PREFIX", prefix),
            SetVar("CONDA_SHLVL", "1"),
            Source(script),
        ]

    def deactivate(self, prefix: str, script: Path) -> list[Step]:
        """``conda deactivate`` back to level 0: PATH first, then deactivate.d."""
        return [
            self._path_edit("remove", prefix),
            Source(script),
            UnsetVar("CONDA_PREFIX"),
            SetVar("CONDA_SHLVL", "0"),
        ]

    def switch(
        self, old: str, old_script: Path, new: str, new_script: Path, between: Sequence[Step] = ()
    ) -> list[Step]:
        """``conda activate new`` while ``old`` is active: deactivate.d first, then PATH."""
        return [
            Source(old_script),
            *between,
            self._path_edit("replace", old, new),
            SetVar("CONDA_PREFIX", new),
            SetVar("CONDA_SHLVL", "1"),
            Source(new_script),
        ]
