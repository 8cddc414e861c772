"""The operating system envfactory runs on: what POSIX and Windows do differently, in one place.

``create`` holds its interrupts back while it starts workers, locks cache entries and staging
markers, runs workers in other processes and lets each notice that its parent died. POSIX gives
``signal.pthread_sigmask``, ``fcntl.flock``, a forkserver and ``os.pidfd_open``; Windows has
none of them, and importing ``fcntl`` there ended every cache-using command in an internal error.
Nothing POSIX-only is imported at module level here.

Windows counterparts:

* Interrupts: Ctrl-C (SIGINT), Ctrl-Break (SIGBREAK) and SIGTERM; there is no signal mask,
  and Python runs every handler in the main thread -- what the mask arranges on POSIX -- so
  blocking is a no-op (handlers that note the signal still defer it).
* Locks: ``LockFileEx`` on one byte far past the end of the file (Windows locks are mandatory
  for the range they cover, so the data stays readable), shared or exclusive, waiting or not;
  a failed non-waiting attempt raises ``BlockingIOError`` like ``flock``.
  https://learn.microsoft.com/windows/win32/api/fileapi/nf-fileapi-lockfileex
* Workers: the ``spawn`` start method (the only one Windows has).
* Parent gone: ``OpenProcess`` + ``WaitForSingleObject`` on the parent's handle.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Executor

WINDOWS = sys.platform == "win32"

LOCK_SH, LOCK_EX, LOCK_NB, LOCK_UN = 1, 2, 4, 8  # fcntl's values

INTERRUPTS: frozenset[int] = frozenset(
    {signal.SIGINT, signal.SIGTERM}
    | ({getattr(signal, "SIGBREAK")} if WINDOWS else {getattr(signal, "SIGHUP")})  # noqa: B009
)
"""What create turns into a clean-up (exit 130)."""


def block_interrupts() -> set[int]:
    """Block ``INTERRUPTS`` for this thread (and the threads and processes it starts); the
    returned mask, given to ``restore_interrupts``, puts back the one before it."""
    if WINDOWS:
        return set()
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS))


def restore_interrupts(previous: set[int]) -> None:
    if not WINDOWS:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def unblock_interrupts() -> None:
    if not WINDOWS:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)


def file_url_path(url: str) -> Path | None:
    """The local path of a ``file://`` URL on this host (None for any other URL):
    ``file:///Z:/chan/a%20b`` is ``Z:\\chan\\a b`` on Windows, where ``urlparse().path``
    gave ``\\Z:\\chan\\...``; ``file:///srv/chan`` is ``/srv/chan`` on POSIX."""
    if not url.startswith("file://"):
        return None
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    return Path(url2pathname(urlparse(url).path))


# --------------------------------------------------------------------------------------------
# File locks


_held: dict[int, int] = {}  # Windows: fd -> the lock it holds (flock converts; LockFileEx stacks)


def flock(fd: int, operation: int) -> None:
    """``fcntl.flock(fd, operation)``, with ``LOCK_*`` from this module, on any host."""
    if not WINDOWS:
        import fcntl

        fcntl.flock(fd, operation)
        return
    _windows_flock(fd, operation)


def _windows_flock(fd: int, operation: int) -> None:
    import ctypes
    import msvcrt
    from ctypes import wintypes

    class Overlapped(ctypes.Structure):
        _fields_ = [
            ("Internal", ctypes.c_void_p),
            ("InternalHigh", ctypes.c_void_p),
            ("Offset", wintypes.DWORD),
            ("OffsetHigh", wintypes.DWORD),
            ("hEvent", wintypes.HANDLE),
        ]

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
    handle = wintypes.HANDLE(msvcrt.get_osfhandle(fd))  # type: ignore[attr-defined,unused-ignore]
    where = Overlapped(0, 0, 0xFFFFFFFE, 0x7FFFFFFF, None)  # one byte far past any data
    if fd in _held:
        kernel32.UnlockFileEx(handle, 0, 1, 0, ctypes.byref(where))
        del _held[fd]
    if operation & LOCK_UN:
        return
    flags = (0x2 if operation & LOCK_EX else 0) | (0x1 if operation & LOCK_NB else 0)
    if not kernel32.LockFileEx(handle, flags, 0, 1, 0, ctypes.byref(where)):
        error = ctypes.get_last_error()  # type: ignore[attr-defined,unused-ignore]
        if error in (33, 158):  # ERROR_LOCK_VIOLATION, ERROR_NOT_LOCKED
            raise BlockingIOError(error, "the file is locked by another process")
        raise ctypes.WinError(error)  # type: ignore[attr-defined,unused-ignore]
    _held[fd] = operation & (LOCK_SH | LOCK_EX)


def owned_privately(st: os.stat_result) -> bool:
    """A file this user owns that nobody else may write (group/other write bits off). Windows
    has neither ``os.getuid`` nor meaningful mode bits (files there are 0o666 or 0o444): its
    ACLs decide, so the files under the user's own profile count as theirs."""
    if WINDOWS:
        return True
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def unlink_open(path: Path, handle: IO[bytes]) -> None:
    """Remove a file this process holds open (a lock marker) and close it. POSIX: unlinked
    while its lock is held, so no other process sees it unlocked. Windows cannot delete a file
    open without FILE_SHARE_DELETE ("Sharing violation"): closed first, which leaves a moment
    in which a concurrent create of the same prefix name may take it for a stale one."""
    if WINDOWS:
        handle.close()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    handle.close()


# --------------------------------------------------------------------------------------------
# Worker processes


def pool_context(preload: Sequence[str]) -> Any:
    """The multiprocessing context for create's workers (POSIX): a forkserver with ``preload``
    imported once. None on Windows, whose workers are threads (``worker_pool``)."""
    if WINDOWS:
        return None
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # it would unblock SIGINT and SIGTERM later
    return context


Init = tuple[Callable[..., None], tuple[Any, ...]]


def worker_pool(count: int, context: Any, process_init: Init, thread_init: Init) -> Executor:
    """Worker processes from ``context``, each started with ``process_init`` (POSIX); threads
    started with ``thread_init`` on Windows, where the only start method, spawn, starts a fresh
    interpreter per worker that imports envfactory again, and ProcessPoolExecutor's result wait
    never returned under wine 8 (multiprocessing.Pool's did). Extraction releases the GIL in
    zlib/bz2/zstd; cache locks are per handle there, so two threads exclude each other like two
    processes."""
    if WINDOWS:
        from concurrent.futures import ThreadPoolExecutor

        return ThreadPoolExecutor(
            count,
            thread_name_prefix="envfactory-cache",
            initializer=thread_init[0],
            initargs=thread_init[1],
        )
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(
        count, mp_context=context, initializer=process_init[0], initargs=process_init[1]
    )


class _Counter:
    """``multiprocessing.Value``'s two members, for threads."""

    def __init__(self) -> None:
        import threading

        self.value = 0
        self._lock = threading.Lock()

    def get_lock(self) -> Any:
        return self._lock


def shared_counter(context: Any) -> Any:
    """A counter workers add to and the parent reads: in shared memory for processes, a plain
    one for threads (Windows)."""
    return _Counter() if context is None else context.Value("q", 0)


def wait_for_exit(pid: int) -> None:
    """Return once process ``pid`` has ended (a worker's watch on the create that started it)."""
    import time

    if WINDOWS:
        import ctypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
        kernel32.OpenProcess.restype = ctypes.c_void_p
        synchronize = 0x00100000
        handle = kernel32.OpenProcess(synchronize, False, pid)
        if handle:
            kernel32.WaitForSingleObject(ctypes.c_void_p(handle), 0xFFFFFFFF)
            return
        return  # no such process: it is gone already
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # pragma: no cover - no pidfd (Linux < 5.3, macOS)
        while True:
            time.sleep(0.5)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            except OSError:
                continue
    import select

    select.select([handle], [], [])  # readable once the process has exited


# --------------------------------------------------------------------------------------------
# Path length

MAX_PATH = 260
"""Windows' ``MAX_PATH``: a path of at most 259 characters and its terminating NUL, unless
long paths are enabled and the program says it is long-path aware (CPython 3.6+ does).
https://learn.microsoft.com/windows/win32/fileio/maximum-file-path-limitation"""

LONG_PATHS_KEY = r"SYSTEM\CurrentControlSet\Control\FileSystem"


def long_paths_enabled() -> bool | None:
    """Windows: whether ``HKLM\\SYSTEM\\CurrentControlSet\\Control\\FileSystem`` has
    ``LongPathsEnabled`` = 1 (False when the value is 0 or missing, Windows' default); None on
    any other host, which has no such limit."""
    if not WINDOWS:
        return None
    import winreg  # type: ignore[import-not-found,unused-ignore]

    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, LONG_PATHS_KEY) as key:  # type: ignore[attr-defined,unused-ignore]
            value, _kind = winreg.QueryValueEx(key, "LongPathsEnabled")  # type: ignore[attr-defined,unused-ignore]
    except OSError:
        return False
    return bool(value == 1)


def registry_values(hklm_path: str) -> list[object]:
    """The data of every value under ``HKEY_LOCAL_MACHINE\\hklm_path`` (Windows; [] elsewhere
    or when the key cannot be read)."""
    if not WINDOWS:
        return []
    import winreg  # type: ignore[import-not-found,unused-ignore]

    values: list[object] = []
    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, hklm_path) as key:  # type: ignore[attr-defined,unused-ignore]
            index = 0
            while True:
                try:
                    _, value, _ = winreg.EnumValue(key, index)  # type: ignore[attr-defined,unused-ignore]
                except OSError:
                    break
                values.append(value)
                index += 1
    except OSError:
        return []
    return values


# --------------------------------------------------------------------------------------------
# Users and links


def user_name(uid: int) -> str:
    """``name (uid N)`` from the POSIX user database; ``uid N`` where there is none (Windows)
    or the uid is not in it."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def junction(target: Path, link: Path) -> None:
    """A directory junction ``link`` -> ``target`` (Windows: no privilege needed, unlike a
    symlink); OSError where the filesystem has none (wine's: "Request not supported") or on
    another host."""
    if not WINDOWS:
        raise OSError(f"no directory junctions on {sys.platform}")
    import _winapi

    _winapi.CreateJunction(str(target), str(link))  # type: ignore[attr-defined,unused-ignore]
