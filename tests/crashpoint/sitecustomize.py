"""A crash injector for the cache's kill -9 tests (tests/test_hostile_cache.py), loaded by
Python's ``site`` in every process of a create started with this directory on PYTHONPATH:
the create, its multiprocessing fork server and the workers forked from it.

``EF_CRASH_AFTER=EVENT:N:ROOT`` kills the process with SIGKILL at the first audit event
(PEP 578) that follows the N-th ``EVENT`` (``os.rename``, ``os.remove``, ``os.rmdir``,
``os.mkdir``, ``open`` for writing) on a path under ROOT (or on a name relative to a directory
descriptor, as ``shutil.rmtree`` uses), counted per process; ``EF_CRASH_LOG`` names a file
that gets one line each time it fires; ``EF_CRASH_SIGNAL`` sends another signal than SIGKILL
(``SIGINT``: a Ctrl-C that lands between the same two calls). Nothing here knows envfactory's
internals: it cuts the process between two system calls, as a power cut or the OOM killer
would."""

from __future__ import annotations

import os
import signal
import sys


def _install() -> None:
    spec = os.environ.get("EF_CRASH_AFTER")
    if not spec:
        return
    event, count, root = spec.split(":", 2)
    wanted = int(count)
    log = os.environ.get("EF_CRASH_LOG", "")
    sent = getattr(signal, os.environ.get("EF_CRASH_SIGNAL", "SIGKILL"))
    state = {"seen": 0, "armed": False, "busy": False}

    def concerns(args: tuple[object, ...]) -> bool:
        path = args[1] if event == "os.rename" else args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return False
        return path.startswith(root) or not os.path.isabs(path)  # noqa: PTH117 (at start-up)

    def hook(name: str, args: tuple[object, ...]) -> None:
        if state["busy"]:
            return
        if state["armed"]:
            state["busy"] = True
            if log:
                with open(log, "a") as handle:  # noqa: PTH123
                    handle.write(f"{os.getpid()} {event}:{wanted} before {name}\n")
            os.kill(os.getpid(), sent)
        if name != event:
            return
        if name == "open" and (len(args) < 3 or not isinstance(args[2], int) or not args[2] & 3):
            return  # opened for reading
        if concerns(args):
            state["seen"] += 1
            if state["seen"] == wanted:
                state["armed"] = True

    sys.addaudithook(hook)


_install()
