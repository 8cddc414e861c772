"""What a process of the package cache's forkserver does when the create it works for is gone.

Imported by that forkserver only: ``pkgcache`` names it in ``set_forkserver_preload``. A create
killed with kill -9 while the forkserver forks a worker for it leaves that worker reading its
start-up data from a pipe nobody writes any more; multiprocessing then prints an ``EOFError``
traceback into the stderr the worker shares with the dead create (the user's terminal). Such a
worker now ends quietly; any other error, and any error while the create lives, is printed as
before."""

from __future__ import annotations

import os
import sys
from types import TracebackType

OWNER = os.getppid()  # the create that started the forkserver, which imports this


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process has that pid now: not ours, but alive
        return True
    return True


def _hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, EOFError | ConnectionError) and not alive(OWNER):
        return  # the pipe closed because the create is gone: nothing to tell anyone
    sys.__excepthook__(kind, value, tb)


sys.excepthook = _hook
