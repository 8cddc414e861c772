"""Runs conda's own activator (conda 24.7, vendored in conda-lock) the way ``conda activate``
does: ``conda_real.py SHELL activate [--stack] PREFIX`` or ``SHELL deactivate`` prints the
commands conda's activator for SHELL builds from this process's environment (for cmd.exe: the
path of the temporary .bat it wrote). Nothing of conda's is changed or modelled here. The real
Windows Python 3.8 of tests/shells/winpython.py runs it too (tests/test_activation_conda_cmd.py)."""

from __future__ import annotations

import sys
from typing import Any

# `from conda_lock._vendor.conda import activate` fails (No module named 'conda'); this works
import conda_lock._vendor.conda.activate as activate

CLASSES: dict[str, Any] = {
    "posix": activate.PosixActivator,
    "csh": activate.CshActivator,
    "fish": activate.FishActivator,
    "xonsh": activate.XonshActivator,
    "cmd.exe": activate.CmdExeActivator,
    "powershell": activate.PowerShellActivator,
}

if __name__ == "__main__":
    shell, *arguments = sys.argv[1:]
    sys.stdout.write(CLASSES[shell](arguments).execute())
