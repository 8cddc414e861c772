"""``conda activate`` / ``conda deactivate`` in wine's cmd, by conda's own code: conda 24.7's
``CmdExeActivator`` (vendored in conda-lock, run by ``conda_real.py``) under the real Windows
Python of tests/shells/winpython.py, its output used the way conda's
``condabin\\_conda_activate.bat`` uses it: the activator writes a temporary .bat of ``@SET`` lines
and ``@CALL``s of the activate.d/deactivate.d scripts and prints its path; the caller reads the
path and CALLs the file in its own context, then deletes it. Left out of that .bat: PROMPT, the
conda 4.3 fixup, and its SETLOCAL around running conda (which only scopes what it sets for
conda.exe: delayed expansion, a short TMP, the base install's directories in front of PATH);
its ``FOR ... DO @ENDLOCAL & @SET _TEMP_SCRIPT_PATH=%%~A`` does not work in wine's cmd, which
leaves ``%~A`` unexpanded after the ``&``, and its ``SET /P`` of the path drops the last
character there (conda prints no line break), so the path is read by ``FOR /F``, as conda 4.x
did. The activator sees the caller's environment as it
is."""

from __future__ import annotations

from pathlib import Path

from shells.harness import Source
from shells.wine import win_path

CONDA_REAL = Path(__file__).parent / "conda_real.py"

SNIPPET = """\
@"{python}" -B "{conda_real}" cmd.exe {args} 1>"{out}"
@IF %ErrorLevel% NEQ 0 @EXIT /B %ErrorLevel%
@FOR /F "usebackq delims=" %%i IN ("{out}") DO @SET "_TEMP_SCRIPT_PATH=%%i"
@DEL /F /Q "{out}"
@IF "%_TEMP_SCRIPT_PATH%" == "" @EXIT /B 1
@CALL "%_TEMP_SCRIPT_PATH%"
@DEL /F /Q "%_TEMP_SCRIPT_PATH%"
@SET _TEMP_SCRIPT_PATH=
"""


class CondaCmd:
    """``conda ARGS`` as a .bat step of a wine session (one snippet file per command)."""

    def __init__(self, python: Path, workdir: Path) -> None:
        self.python, self.workdir, self.count = python, workdir, 0
        workdir.mkdir(parents=True, exist_ok=True)

    def __call__(self, *args: str) -> Source:
        self.count += 1
        snippet = self.workdir / f"conda-{self.count}.bat"
        text = SNIPPET.format(
            python=win_path(self.python),
            conda_real=win_path(CONDA_REAL),
            args=" ".join(f'"{a}"' if " " in a else a for a in args),
            out=win_path(self.workdir / f"conda-{self.count}.out"),
        )
        snippet.write_bytes(text.replace("\n", "\r\n").encode("ascii"))
        return Source(snippet)
