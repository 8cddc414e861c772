"""Filesystem adapter: atomic writes, so no reader ever sees a half-written file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RenderedFile:
    """A generated file, by its path relative to the directory it is written into."""

    relpath: str
    content: str


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename."""
    atomic_write_many([(path, data)])


def atomic_write_many(items: Iterable[tuple[Path, str | bytes]]) -> None:
    """Write several files so that either all of them are replaced or none is.

    Every temporary file is written and flushed before the first rename; a failure while
    writing removes the temporaries and leaves the old files untouched.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in items:
            path.parent.mkdir(parents=True, exist_ok=True)
            payload = data.encode("utf-8") if isinstance(data, str) else data
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            staged.append((Path(name), path))
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


def write_rendered(files: Sequence[RenderedFile], directory: Path) -> list[Path]:
    """Write the files under ``directory`` atomically (all or nothing); return their paths."""
    items = [(directory / f.relpath, f.content) for f in files]
    atomic_write_many(items)
    return [path for path, _ in items]
