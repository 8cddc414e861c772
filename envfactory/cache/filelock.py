"""Waiting for file locks, and saying so: the package cache's locks on top of the host
adapter's ``flock`` (``envfactory.host.flock``: ``fcntl.flock`` on POSIX, ``LockFileEx`` on
Windows; shared and exclusive locks on an open file, released when the file is closed or the
process dies, kill -9 included). Nothing POSIX-only is imported at module level: the CLI runs
on Windows too (Windows is a host, not only a target: envfactory/host.py).

Every wait polls a non-blocking attempt, so that the caller can say what it waits for while
it waits (``waiting``) and give up at a deadline, never a silent block.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import IO

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # absent on Windows: callers check with lstat


def open_lock_file(path: str) -> IO[bytes]:
    """Open (creating it) a lock file for reading and writing, never through a symlink."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW | getattr(os, "O_BINARY", 0), 0o644)
    return os.fdopen(fd, "r+b")


def try_lock(handle: IO[bytes], *, shared: bool) -> bool:
    """Take the lock without waiting; False when another process holds a conflicting one."""
    from envfactory import host

    try:
        host.flock(handle.fileno(), (host.LOCK_SH if shared else host.LOCK_EX) | host.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock(handle: IO[bytes]) -> None:
    from envfactory import host

    host.flock(handle.fileno(), host.LOCK_UN)


REPORT_AFTER_S = 1.0
REPORT_EVERY_S = 5.0


def wait_lock(
    handle: IO[bytes],
    *,
    shared: bool,
    waiting: Callable[[float], None] | None = None,
    deadline_s: float | None = None,
) -> bool:
    """Take the lock, waiting for it; ``waiting(seconds waited so far)`` is called once the
    wait passes ``REPORT_AFTER_S`` and every ``REPORT_EVERY_S`` after that. False when
    ``deadline_s`` passed first."""
    if try_lock(handle, shared=shared):
        return True
    start = time.monotonic()
    next_report = start + REPORT_AFTER_S
    delay = 0.005
    while True:
        time.sleep(delay)
        delay = min(delay * 2, 0.25)
        if try_lock(handle, shared=shared):
            return True
        now = time.monotonic()
        if deadline_s is not None and now - start > deadline_s:
            return False
        if waiting is not None and now >= next_report:
            waiting(now - start)
            next_report = now + REPORT_EVERY_S
