"""Filesystem adapter: atomic writes, so no reader ever sees a half-written file.

Each file is written to a temporary name in its own directory, flushed to disk, then renamed
over the target. A set of files (a lock: its environment files, explicit locks and
conda-lock.yml) is renamed in the order given, after every temporary is complete, so a caller
that puts the file holding the others' digests last gets a set that is either whole or visibly
mixed (``lock --check`` compares the digests).

Temporary files are named ``.<name>.<pid>-<random>.tmp`` and created with mode 0666 minus the
umask (0644 under umask 022), the mode a plain ``open()`` gives, not mkstemp's 0600. A writer
killed with SIGKILL cannot remove its temporaries; the next write into the same directory
removes those whose process is gone.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from envfactory.errors import UserInputError

_TEMPORARY = re.compile(r"\A\..+\.(?P<pid>\d+)-[0-9a-f]{8}\.tmp\Z")
# What this module wrote before it named temporaries by pid (tempfile.mkstemp's 8 characters).
_OLD_TEMPORARY = re.compile(r"\A\..+\.[a-z0-9_]{8}\.tmp\Z")
# A temporary without a pid to test, or on a system where the test is unavailable, is removed
# once it is this old: far longer than any write takes.
_STALE_AFTER_SECONDS = 600


class RenderedFile(NamedTuple):
    """A generated file, by its path relative to the directory it is written into."""

    relpath: str
    content: str


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename."""
    atomic_write_many([(path, data)])


def atomic_write_many(items: Iterable[tuple[Path, str | bytes]]) -> None:
    """Write several files so that either all of them are replaced or none is, renaming them in
    the order given (put the file that vouches for the others last).

    Every temporary file is written and flushed before the first rename; a failure while
    writing removes the temporaries and leaves the old files untouched.
    """
    staged: list[tuple[Path, Path]] = []
    cleaned: set[Path] = set()
    try:
        for path, data in items:
            parent = path.parent
            parent.mkdir(parents=True, exist_ok=True)
            if parent not in cleaned:
                remove_stale_temporaries(parent)
                cleaned.add(parent)
            payload = data.encode("utf-8") if isinstance(data, str) else data
            temporary = _create_temporary(path)
            staged.append((temporary, path))
            fd = os.open(temporary, os.O_WRONLY | getattr(os, "O_BINARY", 0))
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
        for temporary, path in staged:
            temporary.replace(path)
    finally:
        for temporary, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()


def _create_temporary(path: Path) -> Path:
    """An empty new file next to ``path``, mode 0666 less the umask (the kernel applies it)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        temporary = path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
        try:
            os.close(os.open(temporary, flags, 0o666))
        except FileExistsError:  # pragma: no cover - 32 random bits collided
            continue
        return temporary


def write_cached(path: Path, data: str | bytes) -> bool:
    """Write a file that a cache can make again (a parsed lock, a cache entry's summary):
    through a temporary and a rename, so readers see the old file or the new one, but without
    ``fsync`` or the sweep for stale temporaries (thousands of files in a package cache's
    root): a file lost in a crash is only a miss. False where it cannot be written (a
    read-only cache goes without)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temporary: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = _create_temporary(path)
        temporary.write_bytes(payload)
        temporary.replace(path)
    except OSError:
        if temporary is not None:
            with contextlib.suppress(OSError):
                temporary.unlink()
        return False
    return True


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Remove the temporaries that a killed writer left in ``directory``; return them."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.endswith(".tmp") or not entry.name.startswith("."):
            continue
        match = _TEMPORARY.match(entry.name)
        if not match and not _OLD_TEMPORARY.match(entry.name):
            continue
        # Its writer is gone (killed), or it is older than any write takes (a reused pid, or a
        # system where the pid cannot be asked).
        stale = match is not None and _process_alive(int(match["pid"])) is False
        if not stale:
            try:
                stale = now - entry.stat(follow_symlinks=False).st_mtime > _STALE_AFTER_SECONDS
            except OSError:
                continue
        if stale and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                Path(entry.path).unlink()
                removed.append(Path(entry.path))
    return removed


def _process_alive(pid: int) -> bool | None:
    """Whether process ``pid`` runs; None where that cannot be asked safely (Windows: os.kill
    with any signal but CTRL_* terminates the process)."""
    if sys.platform == "win32":
        return None
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OSError:
        return None
    return True


def write_rendered(files: Sequence[RenderedFile], directory: Path) -> list[Path]:
    """Write the files under ``directory`` atomically (all or nothing); return their paths."""
    items = [(directory / f.relpath, f.content) for f in files]
    atomic_write_many(items)
    return [path for path, _ in items]


def read_text(path: Path, what: str, hint: str) -> str:
    """A data file a user or a pull request gave us, as text: UTF-8 (a UTF-8 byte-order mark is
    allowed); anything else is refused with the byte offset, never guessed at."""
    data = path.read_bytes()
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE)):
        raise UserInputError(
            f"{path}: {what} is UTF-16 or UTF-32 (it starts with a byte-order mark)",
            f"save it as UTF-8; {hint}",
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserInputError(
            f"{path}:{line}: {what} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start})",
            f"save it as UTF-8; {hint}",
        ) from None
