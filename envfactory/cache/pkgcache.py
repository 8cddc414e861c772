"""The package cache that ``create``, ``mirror`` and ``verify`` share: what they use of it.

``PackageCache.acquire`` brings a lock's packages into the cache and leases them to a create;
``info`` and ``clean`` serve ``envfactory cache``. The jobs behind it, one module each:
``layout`` (where the cache is, entry names, whose it may be), ``pathcheck`` (every check of a
package's ``paths.json``, before and after linking), ``summary`` (what a warm create reads of an
entry), ``staging`` (work directories and interrupts), ``fetch`` (archives and filling an entry),
``pool`` (the worker processes), ``lease`` (entry locks and rattler's view), ``unpack``.

Layout: every entry is named by its archive's sha256, filled once, published complete by one
atomic rename, and never changed in place after (docs/lock-create.md, "The package cache"):

``<root>/sha256/<sha256>/``
    one archive's entry: ``pkg/`` (the extracted package), ``entry.json`` (the archive's
    sha256 and md5) and ``summary.json`` (``EntrySummary``: what a create needs of it, with
    the size, mtime and inode of every file). It is unpacked into a staging directory only
    after the archive's hash equalled the lock's and its members stayed within what its
    ``info/paths.json`` declares (``unpack``), checked (``pathcheck.check_extracted``), then renamed
    into place; a kill -9 at any point leaves either no entry or a complete one. A second
    process that fills the same archive meanwhile finds the name taken and drops its copy;
``<root>/sha256/<sha256>.lock``
    shared-locked while a prefix links from the entry, exclusive while ``cache clean`` or a
    create retires a damaged entry (renamed out of the way first, then removed). Locks are
    taken in one sorted order, and nothing waits for an exclusive lock while it holds
    another, so two creates cannot wait on each other; a wait says what it waits for;
``<root>/views/<key>/``
    rattler's cache layout over the entries of one set of packages (``lease.Lease``):
    ``<name>-<version>-<build>`` symlinks to the entries, each with rattler's lock file
    (8-byte revision, 32-byte sha256); kept for the next create of the same lock, shared-locked
    while a create links through it, removed by ``cache clean`` when none does;
``<root>/md5/<md5>``
    the sha256 of the archive with that md5 (for locks that record only an md5), checked
    against the entry's own ``entry.json`` on use;
``<root>/<file>``
    the archive as downloaded (conda keeps them too), so ``mirror`` and a later ``clean
    --extracted`` need not download again; always checked against the lock's hash before use;
``<root>/.staging/<random>/``
    work in progress, with a marker file its process holds a lock on; the next run removes
    any whose marker nobody holds (the process died, kill -9 included). A view is made
    there and renamed into ``views/``; a create's own view (a kept one that differs, a
    Windows host) stays there until the create ends.

Before an entry is used, each time: it is a directory owned by this user that no one else
can write; its ``entry.json`` names the archive; the package's own ``info/index.json`` names
the locked package (name, version, build, subdir); and every file still has the size, mtime
and inode it had when it was checked. An entry that fails the last check (a file edited
through a hard link from some environment) is retired and unpacked again, so an edit does
not travel into the next environment.

The cache directory is refused when another user owns it or can write it (group- or
world-writable), the way ssh treats ``~/.ssh``: such a user could plant entries. Several
users share archives, not entries: docs/security.md, "Another local user".

Where: the first directory of ``ENVFACTORY_PKGS_DIRS`` (``os.pathsep``-separated), else
``$XDG_CACHE_HOME/envfactory/pkgs`` (``~/.cache/envfactory/pkgs``; ``%LOCALAPPDATA%`` on
Windows). Further ``ENVFACTORY_PKGS_DIRS`` entries and ``CONDA_PKGS_DIRS`` (comma-separated, as
conda reads it) are read-only sources of *archives*: conda keeps ``<file>`` there, checked here
against the lock's hash before use and never written to. Their extracted directories are not
used: conda's entries carry no sha256 lock and were never checked the way ``check_extracted``
checks.

Nothing POSIX-only is imported at module level (the CLI runs on Windows hosts): locks go
through ``filelock``, the rest through ``envfactory.host``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

from envfactory.cache import fetch, pool
from envfactory.cache.layout import (
    BY_MD5,
    ENTRIES,
    ENV_VAR,
    LEGACY_ENTRY,
    MEMO,
    PACKAGE,
    RECORD,
    SHA256_NAME,
    STAGING,
    VIEWS,
    CacheLocation,
    Outcome,
    Wanted,
    archive_name,
    cache_location,
    check_owned,
    check_private,
    entry_name,
    expected_hash,
)
from envfactory.cache.lease import CachedPackage, Lease, open_entry_lock, retire
from envfactory.cache.pathcheck import check_index
from envfactory.cache.staging import sweep_stale
from envfactory.cache.summary import EntrySummary, read_summary, stamps_hold
from envfactory.cache.unpack import disk_full
from envfactory.errors import ToolError
from envfactory.fsio import remove_stale_temporaries, write_cached

# What the stages above use of the cache (create, update, mirror, verify, the CLI); the checks
# of a package's files are pathcheck's, the staging directories and interrupts staging's.
__all__ = [
    "CacheInfo",
    "CacheLocation",
    "CacheProgress",
    "CachedPackage",
    "Lease",
    "PackageCache",
    "cache_location",
    "callbacks",
    "saying_waits",
]


class CacheProgress(Protocol):
    """Told what the cache does, so the CLI can draw a progress bar (the core never prints).
    One that also has ``transferred(nbytes)`` (``envfactory.progress.Transfer``) is told the
    bytes the workers download, a few times a second."""

    def start(self, total: int) -> None:
        """``total`` packages are needed."""

    def fetched(self, name: str, nbytes: int, outcome: str) -> None:
        """One package is ready; ``outcome``: cached, extracted or downloaded."""

    def waiting(self, message: str) -> None:
        """The cache waits for a lock another process holds; ``message`` says which and why
        (called after the first second of a wait, then every few seconds)."""


class _Silent:
    def start(self, total: int) -> None:
        pass

    def fetched(self, name: str, nbytes: int, outcome: str) -> None:
        pass

    def waiting(self, message: str) -> None:
        pass


class CacheInfo(NamedTuple):
    root: Path
    archive_sources: tuple[Path, ...]
    packages: int
    archives: int
    staging: int
    bytes: int
    locks: int = 0  # parsed locks kept in MEMO


class PackageCache:
    def __init__(self, location: CacheLocation | None = None) -> None:
        self.location = location or cache_location()
        self.root = self.location.root
        self.entries = self.root / ENTRIES
        fetch.new_sessions()

    @property
    def memo(self) -> Path:
        """Where ``create`` keeps the locks it parsed (``lockfile.load_document``)."""
        return self.root / MEMO

    def entry(self, sha256: str) -> Path:
        """The extracted package of the archive with this sha256 (it may not be there)."""
        return self.entries / sha256 / PACKAGE

    # -- bookkeeping ------------------------------------------------------------------------

    def _prepare(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            check_private(self.root, follow=True)
            for sub in (ENTRIES, BY_MD5, STAGING, MEMO, VIEWS):
                with contextlib.suppress(FileExistsError):
                    (self.root / sub).mkdir()
                check_private(self.root / sub, follow=False)
            tag = self.root / "CACHEDIR.TAG"
            if not tag.exists():
                write_cached(
                    tag,
                    "Signature: 8a477f597d28d172789f06886806bc55\n"
                    "# envfactory's package cache (https://bford.info/cachedir/)\n",
                )
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise disk_full("preparing the package cache", self.root) from None
            raise ToolError(
                f"cannot use the package cache {self.root}: {exc.strerror}",
                f"point {ENV_VAR} at a writable directory",
            ) from None
        sweep_stale(self.root / STAGING, "")

    def info(self) -> CacheInfo:
        packages = archives = staging = total = locks = 0
        if self.root.is_dir():
            for child in self.root.iterdir():
                if child.name == STAGING:
                    staging = sum(1 for _ in child.iterdir())
                elif child.name == MEMO:
                    locks = sum(1 for _ in child.glob("*.json"))
                elif child.name.startswith("."):
                    continue  # the pip side (pipcache) counts its own
                elif child.name == ENTRIES:
                    packages = sum(1 for p in child.iterdir() if SHA256_NAME.match(p.name))
                elif child.name.endswith((".tar.bz2", ".conda")):
                    archives += 1
            for dirpath, _dirs, files in os.walk(self.root):
                for name in files:
                    with contextlib.suppress(OSError):
                        total += (Path(dirpath) / name).lstat().st_size
        return CacheInfo(
            self.root, self.location.archive_sources, packages, archives, staging, total, locks
        )

    def clean(self, archives: bool = True, extracted: bool = True) -> tuple[int, int]:
        """Remove archives and/or extracted packages that no process is using (an entry some
        create links from is skipped), and with the extracted packages the parsed locks
        (``MEMO``). An entry is renamed out of the way before it is removed, so a kill -9
        meanwhile leaves no half-removed entry under its name. Returns (entries removed,
        bytes freed)."""
        before = self.info().bytes
        removed = 0
        if not self.root.is_dir():
            return 0, 0
        sweep_stale(self.root / STAGING, "")
        remove_stale_temporaries(self.root)
        if extracted:
            shutil.rmtree(self.root / MEMO, ignore_errors=True)
            shutil.rmtree(self.root / BY_MD5, ignore_errors=True)
            if self.entries.is_dir():
                for child in sorted(self.entries.iterdir()):
                    if SHA256_NAME.match(child.name) and retire(self.root, child.name, wait=False):
                        removed += 1
            if (self.root / VIEWS).is_dir():  # the views of entries: those no create links through
                for child in sorted((self.root / VIEWS).iterdir()):
                    if SHA256_NAME.match(child.name):
                        retire(self.root, child.name, wait=False, under=VIEWS)
        for child in sorted(self.root.iterdir()):
            # staging, parsed locks, the pip side (pipcache), the entries and md5 notes
            if child.name.startswith(".") or child.name in (ENTRIES, BY_MD5, VIEWS):
                continue
            archive = child.name.endswith((".tar.bz2", ".conda"))
            if extracted and not archive and LEGACY_ENTRY.match(child.name):
                # an entry or sidecar of envfactory <= 0.3's layout (<name>-<version>-<build>)
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                    removed += 1
                else:
                    child.unlink(missing_ok=True)
            elif archives and archive and child.is_file():
                child.unlink(missing_ok=True)
                removed += 1
        return removed, max(0, before - self.info().bytes)

    def cached_archive(self, pkg: Wanted) -> Path | None:
        """A copy of ``pkg``'s archive with the lock's hash (``fetch.cached_archive``)."""
        return fetch.cached_archive(self.location, pkg)

    # -- archives ---------------------------------------------------------------------------

    def _sha256_of(self, pkg: Wanted) -> str | None:
        """The sha256 of the locked archive: the lock's, or for an md5-only lock the one the
        cache noted when it filled the archive with that md5 (None when it did not)."""
        algorithm, expected = expected_hash(pkg)
        if algorithm == "sha256":
            return expected
        try:
            with open(self.root / BY_MD5 / expected, "rb") as handle:  # noqa: PTH123
                noted = handle.read(80).decode("ascii", "replace").strip()
        except OSError:
            return None
        return noted if SHA256_NAME.match(noted) else None

    def _check_entry(
        self, pkg: Wanted, sha: str
    ) -> tuple[Literal["ok", "absent", "damaged"], EntrySummary | None]:
        """Whether the entry of ``sha`` can be linked for ``pkg`` (module docstring). An
        entry owned by another user, or writable by others, is refused; one whose archive is
        another package is refused (``check_index``)."""
        # plain strings: this runs for every package of every create
        directory = f"{self.entries}/{sha}"
        try:
            st = os.lstat(directory)
        except FileNotFoundError:
            return "absent", None
        check_owned(Path(directory), st)
        try:
            with open(f"{directory}/{RECORD}", "rb") as handle:  # noqa: PTH123
                record = json.loads(handle.read())
        except (OSError, ValueError):
            return "damaged", None
        if not isinstance(record, dict) or record.get("sha256") != sha:
            return "damaged", None
        algorithm, expected = expected_hash(pkg)
        if algorithm == "md5" and record.get("md5") != expected:
            (self.root / BY_MD5 / expected).unlink(missing_ok=True)  # a stale note
            return "absent", None
        package = f"{directory}/{PACKAGE}"
        check_index(pkg, package)
        summary = read_summary(directory, sha)
        if summary is None or not stamps_hold(package, summary):
            return "damaged", None
        return "ok", summary

    def acquire(self, packages: Sequence[Wanted], progress: CacheProgress | None = None) -> Lease:
        """Make sure every package is in the cache, checked; return a lease holding a shared
        lock on each entry until it is closed (so no process removes one meanwhile), with a
        view directory (``Lease.view``) that ``rattler.install`` links from.

        Entries already there cost a lock, a look and one ``lstat`` per file. The others are
        fetched, checked, unpacked and published by a bounded pool of worker processes
        (``pool.workers()``; processes, because rattler's extraction holds the GIL); they take no
        lock. Each pass takes the shared locks in the order of the entries' names and holds
        none while it fills or retires, so no two creates can wait on each other. On a
        failure or an interrupt the queued work is cancelled and the running work is waited
        for before this returns, so nothing writes into the cache's staging directories
        afterwards; a worker ignores SIGINT and leaves that to this process, and removes its
        own staging directory."""
        report = progress or _Silent()
        names = [entry_name(p) for p in packages]
        for pkg in packages:
            archive_name(pkg)
            expected_hash(pkg)
        self._prepare()
        report.start(len(packages))
        lease = Lease(self.root)
        outcomes: dict[int, Outcome] = {}
        try:
            for _attempt in range(4):
                lease.release()
                found, missing, damaged = self._take(packages, lease, report)
                if damaged:
                    lease.release()
                    for sha in sorted(damaged):
                        retire(self.root, sha, wait=True, waiting_for=report.waiting)
                    continue
                if not missing:
                    break
                lease.release()

                def landed(i: int, outcome: Outcome, size: int) -> None:
                    outcomes[i] = outcome
                    report.fetched(packages[i].name, size, outcome)

                pool.fill(
                    self.location, missing, packages, landed, getattr(report, "transferred", None)
                )
            else:
                pkg = packages[(missing or [0])[0]]
                raise ToolError(
                    f"{pkg.describe()}: its cache entry keeps changing",
                    f"another process removes or damages entries of {self.entries}; run one "
                    f"create at a time or give each its own {ENV_VAR}",
                )
            for i, (_sha, summary) in sorted(found.items()):
                if i not in outcomes:
                    report.fetched(packages[i].name, summary.size, "cached")
            lease.packages = [
                CachedPackage(
                    self.entry(found[i][0]),
                    found[i][0],
                    found[i][1],
                    outcomes.get(i, "cached"),
                    names[i],
                )
                for i in range(len(packages))
            ]
            lease.make_view(report.waiting)
        except BaseException:
            lease.close()
            raise
        return lease

    def _take(
        self, packages: Sequence[Wanted], lease: Lease, report: CacheProgress
    ) -> tuple[dict[int, tuple[str, EntrySummary]], list[int], set[str]]:
        """One pass: shared locks on the entries there, in sorted order, each checked. Returns
        the usable ones by index (sha256 and summary), the indices to fill, the damaged."""
        shas = [self._sha256_of(p) for p in packages]
        found: dict[int, tuple[str, EntrySummary]] = {}
        missing: list[int] = []
        damaged: set[str] = set()
        for i in sorted(range(len(packages)), key=lambda i: shas[i] or ""):
            sha, pkg = shas[i], packages[i]
            if sha is None:
                missing.append(i)
                continue
            handle = open_entry_lock(self.entries, sha, pkg.describe(), report.waiting)
            lease.add(handle)
            state, summary = self._check_entry(pkg, sha)
            if state == "ok" and summary is not None:
                found[i] = (sha, summary)
            elif state == "damaged":
                damaged.add(sha)
            else:
                missing.append(i)
        return found, sorted(missing), damaged


def saying_waits(progress: CacheProgress | None, say: Callable[[str], None]) -> CacheProgress:
    """``progress`` (or none) with every wait for a lock told to ``say`` as well: a create
    that waits for another process says so on every output, not only on a progress bar."""
    inner = progress or _Silent()

    class _Said:
        def start(self, total: int) -> None:
            inner.start(total)

        def fetched(self, name: str, nbytes: int, outcome: str) -> None:
            inner.fetched(name, nbytes, outcome)

        def waiting(self, message: str) -> None:
            say(message)

    said = _Said()
    if hasattr(inner, "transferred"):  # told the bytes the workers download (progress.Transfer)
        said.transferred = inner.transferred  # type: ignore[attr-defined]
    return said


def callbacks(
    start: Callable[[int], None],
    fetched: Callable[[str, int, str], None],
    waiting: Callable[[str], None] | None = None,
) -> CacheProgress:
    """A ``CacheProgress`` from functions (what the CLI passes)."""

    class _Progress:
        def start(self, total: int) -> None:
            start(total)

        def fetched(self, name: str, nbytes: int, outcome: str) -> None:
            fetched(name, nbytes, outcome)

        def waiting(self, message: str) -> None:
            if waiting is not None:
                waiting(message)

    return _Progress()
