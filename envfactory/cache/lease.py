"""The locks that keep an entry whole while a prefix links from it, and the view of the
entries in rattler's cache layout that ``rattler.install`` links through.

``<root>/sha256/<sha256>.lock`` is shared-locked while a prefix links from the entry
(``open_entry_lock``), exclusive while ``cache clean`` or a create retires a damaged entry
(``retire``: renamed out of the way first, then removed). Locks are taken in one sorted order,
and nothing waits for an exclusive lock while it holds another, so two creates cannot wait on
each other; a wait says what it waits for.

A ``Lease`` holds a create's shared locks and its view: ``<name>-<version>-<build>`` symlinks
(junctions on Windows) to the entries, each with rattler's lock file beside it (8-byte revision,
32-byte sha256), which is the layout ``rattler.install`` reads as its package cache.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, NamedTuple

from envfactory import host
from envfactory.cache import filelock
from envfactory.cache.layout import ENTRIES, ENV_VAR, STAGING, VIEWS, WAIT_S, Outcome
from envfactory.cache.staging import Staging
from envfactory.cache.summary import EntrySummary
from envfactory.errors import ToolError

LOCK_REVISION = 1


class CachedPackage(NamedTuple):
    directory: Path  # the extracted package: <root>/sha256/<sha256>/pkg
    sha256: str
    summary: EntrySummary  # of its checked paths.json
    outcome: Outcome
    name: str = ""  # <name>-<version>-<build>: its name in the lease's view (and conda-meta/)


def open_entry_lock(
    entries: Path, sha: str, what: str, waiting_for: Callable[[str], None]
) -> IO[bytes]:
    """The entry's lock file, shared-locked (waiting, and saying so, while ``cache clean``
    or a create retiring the entry holds it exclusively). The lock is held on the file
    that is at the path afterwards (clean removes lock files)."""
    path = f"{entries}/{sha}.lock"
    while True:
        handle = filelock.open_lock_file(path)
        try:

            def waiting(seconds: float) -> None:
                waiting_for(
                    f"{what}: waiting {seconds:.0f} s for the cache entry {entries / sha}"
                    " (another process is removing it: 'cache clean' or a create that "
                    "found it damaged)"
                )

            if not filelock.wait_lock(handle, shared=True, waiting=waiting, deadline_s=WAIT_S):
                raise ToolError(
                    f"{what}: the cache entry {entries / sha} stayed locked by another "
                    f"process for {WAIT_S:.0f} s",
                    "is a 'cache clean' or a create stuck? end it, or give this create its "
                    f"own {ENV_VAR}",
                )
            try:
                same = os.fstat(handle.fileno()).st_ino == os.lstat(path).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            handle.close()
            raise
        if same:
            return handle
        handle.close()  # removed by clean meanwhile: lock the file that is there now


def retire(
    root: Path,
    sha: str,
    *,
    wait: bool,
    waiting_for: Callable[[str], None] | None = None,
    under: str = ENTRIES,
) -> bool:
    """Remove the entry of ``sha`` once no create links from it (its lock exclusive):
    renamed into a staging directory first, so a kill -9 leaves nothing under its name,
    then removed. ``wait``: wait for the lock (saying so); otherwise skip an entry in use.
    True when it was removed. ``under``: ``VIEWS`` for a view (``cache clean``)."""
    entries = root / under
    path = f"{entries}/{sha}.lock"
    with filelock.open_lock_file(path) as handle:
        if wait:

            def waiting(seconds: float) -> None:
                if waiting_for is not None:
                    waiting_for(
                        f"waiting {seconds:.0f} s for other creates to finish linking from "
                        f"the damaged cache entry {entries / sha}, to unpack it again"
                    )

            taken = filelock.wait_lock(handle, shared=False, waiting=waiting, deadline_s=WAIT_S)
            if not taken:
                raise ToolError(
                    f"the damaged cache entry {entries / sha} stayed in use by other "
                    f"processes for {WAIT_S:.0f} s",
                    "let the creates that link from it finish, then run this again",
                )
        elif not filelock.try_lock(handle, shared=False):
            return False
        staging = Staging.make(root / STAGING, "")
        try:
            with contextlib.suppress(FileNotFoundError):
                (entries / sha).rename(staging.path / "retired")
            with contextlib.suppress(OSError):  # Windows: not while it is open
                Path(path).unlink()  # still locked by us: a waiter re-opens (open_entry_lock)
        finally:
            staging.remove()
    return True


def _quiet(_message: str) -> None:
    pass


def _windows_view_entry(entry: Path, link: Path) -> None:
    """A view's entry on a Windows host: a junction to the entry (no privilege needed, unlike
    a symlink); where the filesystem has none (wine's: "Request not supported"), the entry's
    tree again, each file a hard link to the entry's own (its inodes, which the post-link
    check knows)."""
    try:
        host.junction(entry, link)
    except OSError:
        if os.path.lexists(link):  # the directory CreateJunction made before it failed
            link.rmdir()
        shutil.copytree(entry, link, symlinks=True, copy_function=os.link)


def _rattler_lock(cached: CachedPackage) -> bytes:
    """rattler's lock file of a package in its cache: revision, then the archive's sha256."""
    return struct.pack(">Q", LOCK_REVISION) + bytes.fromhex(cached.sha256)


def view_key(packages: Iterable[CachedPackage]) -> str:
    """The name of the view of exactly these packages (each name with its entry's sha256)."""
    import hashlib

    text = "\n".join(sorted(f"{c.name} {c.sha256}" for c in packages))
    return hashlib.sha256(text.encode()).hexdigest()


class Lease:
    """Shared locks on cache entries, held while a prefix links from them, and the view
    ``rattler.install`` links through.

    The view of a set of packages is kept (``<root>/views/<view_key>/``, shared-locked like an
    entry while a create links through it; ``cache clean`` removes the ones not in use), so a
    second create of the same lock neither writes nor removes one: on a busy disk, making and
    removing a view's 2 files per package took longer than the rest of the cache pass. A kept
    view is used only when it holds exactly this create's links and lock files (checked each
    time, one ``readlink`` and one small read per package); otherwise, and on a Windows host
    (junctions), the create makes a view of its own, removed with the lease."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.packages: list[CachedPackage] = []
        self._handles: list[IO[bytes]] = []
        self._guard = threading.Lock()
        self._view: Path | None = None
        self._own_view: Staging | None = None

    @property
    def view(self) -> Path:
        """A directory that holds each package as rattler's cache layout names it
        (``<name>-<version>-<build>``, a symlink to its entry's ``pkg/``, and beside it
        rattler's lock file with the archive's sha256): what ``rattler.install`` reads."""
        if self._view is None:
            raise ToolError("the cache's view was not made", "report this as a bug")
        return self._view

    def source(self, cached: CachedPackage) -> str:
        """The path rattler links ``cached`` from (and records in conda-meta/)."""
        # native separators, as rattler records it (os.path: runs for every package)
        return os.path.join(self.view, cached.name)  # noqa: PTH118

    def make_view(self, waiting_for: Callable[[str], None] | None = None) -> None:
        if host.WINDOWS:
            self._own_view = self._build("view-")
            self._view = self._own_view.path
            return
        key = view_key(self.packages)
        views = self.root / VIEWS
        self.add(open_entry_lock(views, key, "the cache's view", waiting_for or _quiet))
        kept = views / key
        if not self._holds(kept):
            built = self._build("")
            try:
                (built.path / "view").rename(kept)
            except OSError as exc:  # made by another create meanwhile, or something else there
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                    raise
            finally:
                built.remove()
            if not self._holds(kept):
                self._own_view = self._build("view-")
                self._view = self._own_view.path
                return
        self._view = kept

    def _build(self, prefix: str) -> Staging:
        """A view in a new staging directory: itself (``prefix`` given) or its ``view/``."""
        staging = Staging.make(self.root / STAGING, prefix)
        try:
            where = staging.path if prefix else staging.path / "view"
            where.mkdir(exist_ok=True)
            for cached in self.packages:
                link = where / cached.name
                if host.WINDOWS:
                    _windows_view_entry(cached.directory, link)
                else:
                    link.symlink_to(cached.directory)
                (where / f"{cached.name}.lock").write_bytes(_rattler_lock(cached))
        except BaseException:
            staging.remove()
            raise
        return staging

    def _holds(self, view: Path) -> bool:
        """Whether the kept view ``view`` is a real directory with each package's link to its
        entry and rattler's lock file for it, as ``_build`` writes them."""
        try:
            if not stat.S_ISDIR(os.lstat(view).st_mode):
                return False
            for cached in self.packages:
                if os.readlink(f"{view}/{cached.name}") != str(cached.directory):  # noqa: PTH115
                    return False
                with open(f"{view}/{cached.name}.lock", "rb") as handle:  # noqa: PTH123
                    if handle.read(64) != _rattler_lock(cached):
                        return False
        except OSError:
            return False
        return True

    def add(self, handle: IO[bytes]) -> None:
        with self._guard:
            self._handles.append(handle)

    def release(self) -> None:
        with self._guard:
            for handle in self._handles:
                handle.close()  # closing the file releases its lock
            self._handles.clear()

    def close(self) -> None:
        self.release()
        if self._own_view is not None:
            self._own_view.remove()
            self._own_view = None
        self._view = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[CachedPackage]:
        return iter(self.packages)
