"""Staging directories that clean up after dead processes, and the interrupts create turns
into a clean-up.

A staging directory holds a marker file (``MARKER``) whose lock lives as long as its process;
``sweep_stale`` removes the ones whose owner is gone (kill -9 included). ``handling`` and
``interrupts_deferred`` set and hold back SIGINT, SIGTERM and SIGHUP (``host.INTERRUPTS``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from envfactory import host
from envfactory.cache import filelock
from envfactory.ownfiles import create_marker

MARKER = ".envfactory-staging"  # in every staging directory; its owner holds an flock on it


class Staging:
    """A directory holding a marker file whose ``flock`` lives as long as its process."""

    def __init__(self, path: Path, handle: IO[bytes] | None = None) -> None:
        self.path = path
        self._handle = handle

    def __repr__(self) -> str:
        return f"Staging({str(self.path)!r})"

    @classmethod
    def make(cls, parent: Path, prefix: str, mode: int | None = None) -> Staging:
        parent.mkdir(parents=True, exist_ok=True)
        path = parent / f"{prefix}{os.urandom(6).hex()}"
        path.mkdir(mode=0o700)
        handle: IO[bytes] | None = None
        try:
            handle = os.fdopen(create_marker(path / MARKER), "wb")
            filelock.wait_lock(handle, shared=False)  # a new file: nobody else holds it
            handle.write(f"{os.getpid()}\n".encode())
            handle.flush()
            if mode is not None:
                path.chmod(mode)
        except BaseException:  # an interrupt (SIGTERM) or an error before the caller holds it
            if handle is not None:
                handle.close()
            shutil.rmtree(path, ignore_errors=True)
            raise
        return cls(path, handle)

    @classmethod
    def adopt(cls, path: Path) -> Staging:
        """Mark an existing directory for removal: if this process dies before it removes
        it, ``sweep_stale`` will (once the directory is renamed to a staging name). A marker
        already there, or a link a package planted at its name, is removed, never followed."""
        handle = os.fdopen(create_marker(path / MARKER), "wb")
        filelock.wait_lock(handle, shared=False)
        return cls(path, handle)

    def release_marker(self) -> None:
        """Remove the marker (before the directory becomes something permanent)."""
        if self._handle is not None:
            host.unlink_open(self.path / MARKER, self._handle)
            self._handle = None

    def remove(self) -> None:
        if self._handle is not None and host.WINDOWS:  # an open file cannot be removed there
            self._handle.close()
            self._handle = None
        shutil.rmtree(self.path, ignore_errors=True)
        if self._handle is not None:
            self._handle.close()
            self._handle = None


# what create turns into a clean-up (exit 130)
INTERRUPTS = host.INTERRUPTS


@contextlib.contextmanager
def handling(signals: Iterable[int], handler: Callable[[int, Any], None]) -> Iterator[None]:
    """``handler`` for ``signals`` during the block, the handlers before it restored after.
    Only the main thread can set handlers; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP back until the block is done; one that came meanwhile
    is raised as the block ends, to the handler that was there before. For steps an interrupt
    must not cut in two: starting worker processes (a worker the pool does not know of yet
    outlives the pool's clean-up and fails on its removed semaphores, with a traceback).

    Two ways at once. The signal mask: processes started in the block inherit it, so a Ctrl-C
    (sent to the whole process group) does not reach the forkserver while it imports this
    module, nor a worker before ``_worker_init`` ignores SIGINT and unblocks the rest. And
    handlers that note the signal: multiprocessing unblocks SIGINT and SIGTERM itself when it
    starts its resource tracker (``_fill`` starts that before the block)."""
    came: list[int] = []
    try:
        with handling(INTERRUPTS, lambda signum, _frame: came.append(signum)):
            previous = host.block_interrupts()
            try:
                yield
            finally:
                host.restore_interrupts(previous)
    finally:
        if came:
            signal.raise_signal(came[0])


def sweep_stale(parent: Path, prefix: str) -> list[Path]:
    """Remove the staging directories ``parent/<prefix>*`` whose owner is gone: they hold our
    marker and nobody holds its lock. Directories without the marker are not ours: kept."""
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for candidate in sorted(parent.glob(f"{prefix}*")):
        marker = candidate / MARKER
        try:
            if not stat.S_ISDIR(os.lstat(candidate).st_mode):
                continue
            if not stat.S_ISREG(os.lstat(marker).st_mode):
                continue
            with filelock.open_lock_file(os.fspath(marker)) as handle:
                if not filelock.try_lock(handle, shared=False):
                    continue  # alive
                shutil.rmtree(candidate, ignore_errors=True)
        except OSError:
            continue
        removed.append(candidate)
    return removed
