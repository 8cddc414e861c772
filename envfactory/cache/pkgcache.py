"""The package cache that ``create``, ``mirror`` and ``verify`` share.

Layout: every entry is named by its archive's sha256, filled once, published complete by one
atomic rename, and never changed in place after (docs/lock-create.md, "The package cache"):

``<root>/sha256/<sha256>/``
    one archive's entry: ``pkg/`` (the extracted package), ``entry.json`` (the archive's
    sha256 and md5) and ``summary.json`` (``EntrySummary``: what a create needs of it, with
    the size, mtime and inode of every file). It is unpacked into a staging directory only
    after the archive's hash equalled the lock's and its members stayed within what its
    ``info/paths.json`` declares (``unpack``), checked (``check_extracted``), then renamed
    into place; a kill -9 at any point leaves either no entry or a complete one. A second
    process that fills the same archive meanwhile finds the name taken and drops its copy;
``<root>/sha256/<sha256>.lock``
    shared-locked while a prefix links from the entry, exclusive while ``cache clean`` or a
    create retires a damaged entry (renamed out of the way first, then removed). Locks are
    taken in one sorted order, and nothing waits for an exclusive lock while it holds
    another, so two creates cannot wait on each other; a wait says what it waits for;
``<root>/md5/<md5>``
    the sha256 of the archive with that md5 (for locks that record only an md5), checked
    against the entry's own ``entry.json`` on use;
``<root>/<file>``
    the archive as downloaded (conda keeps them too), so ``mirror`` and a later ``clean
    --extracted`` need not download again; always checked against the lock's hash before use;
``<root>/.staging/<random>/``
    work in progress, with a marker file its process holds a lock on; the next run removes
    any whose marker nobody holds (the process died, kill -9 included). A create's *view*
    lives there too: ``<name>-<version>-<build>`` symlinks to the entries it links from, with
    rattler's lock files (8-byte revision, 32-byte sha256), which is the layout
    ``rattler.install`` reads.

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
through ``filelock``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import posixpath
import re
import shutil
import signal
import stat
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple, Protocol

from envfactory import host
from envfactory.cache import filelock, unpack
from envfactory.cache.unpack import disk_full
from envfactory.errors import SystemFailure, ToolError, UserInputError
from envfactory.fsio import remove_stale_temporaries, write_cached
from envfactory.ownfiles import create_marker, is_own_path

ENV_VAR = "ENVFACTORY_PKGS_DIRS"
CONDA_ENV_VAR = "CONDA_PKGS_DIRS"
STAGING = ".staging"
MEMO = ".locks"  # parsed locks by the sha256 of their text (lockfile.load_document)
ENTRIES = "sha256"  # <root>/sha256/<archive sha256>/: one immutable entry per archive
BY_MD5 = "md5"  # <root>/md5/<archive md5>: the sha256 of that archive
PACKAGE = "pkg"  # an entry's extracted package
RECORD = "entry.json"  # an entry's own record: the archive's hashes
ENTRY_FORMAT = 1
MARKER = ".envfactory-staging"  # in every staging directory; its owner holds an flock on it
LOCK_REVISION = 1
CHUNK = 1 << 20
TIMEOUT_S = 60

# conda's name/version/build alphabets (conda.models.match_spec, conda-build's checks), with the
# archive suffixes rattler extracts. A cache entry's name is built from these: nothing else gets
# into a path under the cache.
_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+\-]*\Z")
_VERSION = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+!*\-]*\Z")
_BUILD = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+\-]*\Z")
_ARCHIVE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+!\-]*\.(?:tar\.bz2|conda)\Z")
_HEX = re.compile(r"\A[0-9a-f]+\Z")
PATH_TYPES = frozenset({"hardlink", "softlink", "directory"})
# check_relative runs once per file of every package: one regex each instead of a loop
_DRIVE_OR_CONTROL = re.compile(r"\A[A-Za-z]:|[\x00-\x1f]")
_DOT_COMPONENT = re.compile(r"(?:\A|/)\.{0,2}(?:/|\Z)")  # an empty, '.' or '..' component
# The same checks over many paths joined by line breaks (check_all_relative): substring tests
# and searches that start at one literal character, which re finds quickly; one regex with
# alternatives anchored at every line start took 3x as long (~10^5 paths per TF stack).
_ANY_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")  # every control character but the break
_ANY_DRIVE = re.compile(r"^[A-Za-z]:", re.MULTILINE)
_ANY_DOT_COMPONENT = re.compile(r"/\.\.?(?:/|\n)")  # in "\n/" + line + ... + "\n/"


class Wanted(Protocol):
    """What the cache needs of a locked conda package (``LockedPackage`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def build(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def filename(self) -> str: ...
    @property
    def sha256(self) -> str | None: ...
    @property
    def md5(self) -> str | None: ...
    @property
    def subdir(self) -> str: ...

    def describe(self) -> str: ...


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


# ------------------------------------------------------------------------------------------
# Where the cache lives


def default_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if sys.platform.startswith("win"):
        base = Path(env.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
        return base / "envfactory" / "pkgs"
    xdg = env.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "envfactory" / "pkgs"


class CacheLocation(NamedTuple):
    root: Path
    archive_sources: tuple[Path, ...] = ()  # read-only: conda's pkgs dirs, further entries


def cache_location(env: Mapping[str, str] | None = None) -> CacheLocation:
    env = os.environ if env is None else env
    ours = [Path(p).expanduser() for p in env.get(ENV_VAR, "").split(os.pathsep) if p.strip()]
    conda = [Path(p.strip()).expanduser() for p in env.get(CONDA_ENV_VAR, "").split(",")]
    sources = tuple(p for p in ours[1:] + conda if str(p) not in ("", "."))
    root = ours[0] if ours else default_root(env)
    return CacheLocation(root.absolute(), sources)


# ------------------------------------------------------------------------------------------
# Checks of a package's paths.json (untrusted: it comes from an archive named in a lock)


class PathEntry(NamedTuple):
    """One checked ``paths.json`` entry (a named tuple: a TF environment has ~10^5 of them, and
    a frozen dataclass took four times as long to make)."""

    path: str
    path_type: str
    sha256: str | None = None
    size: int | None = None
    placeholder: str | None = None
    file_mode: str | None = None


class UnsafePackage(ToolError):
    """A package whose contents would write outside the prefix or do not match paths.json."""


def _refuse(what: str, entry: str, why: str) -> UnsafePackage:
    return UnsafePackage(
        f"{what}: refused: paths.json entry {entry!r} {why}",
        "this package is not installed, and nothing was written into the prefix; a lock "
        "naming it is not safe to create from: re-lock from a channel you trust",
    )


def check_relative(what: str, path: str) -> None:
    """``path`` stays inside the prefix on every platform: relative, forward slashes only,
    no empty, ``.`` or ``..`` component, no drive, no NUL or control character."""
    if not path or path.startswith("/") or "\\" in path:
        raise _refuse(what, path, "is empty, absolute or holds a backslash")
    if _DRIVE_OR_CONTROL.search(path):
        raise _refuse(what, path, "names a drive or holds a control character")
    if _DOT_COMPONENT.search(path):
        raise _refuse(what, path, "has an empty, '.' or '..' component")


def check_all_relative(what: str, paths: Sequence[str]) -> None:
    """``check_relative`` of every path, in one regex search over all of them (a package's
    paths are checked on every create: one search instead of two per file); when the search
    finds something, each path is checked on its own, so the error names the first bad one."""
    if _all_relative(paths):
        return
    for path in paths:
        check_relative(what, path)


def _all_relative(paths: Sequence[str]) -> bool:
    """Whether ``check_relative`` passes every path (tests/test_pkgcache.py holds the two to
    the same verdicts)."""
    joined = "\n".join(paths)
    if joined.count("\n") != len(paths) - 1 or "\\" in joined or _ANY_CONTROL.search(joined):
        return False  # a path holding a line break, a backslash or a control character
    framed = f"\n{joined}\n"
    # absolute, or an empty component: at the start, in the middle, at the end, or all of it
    if "\n/" in framed or "//" in framed or "/\n" in framed or "\n\n" in framed:
        return False
    if ":" in joined and _ANY_DRIVE.search(joined):
        return False
    # a '.' or '..' component: with every line led by '/', one that is followed by '/' or ends
    # its line
    return not (
        ("/." in framed or "\n." in framed)
        and _ANY_DOT_COMPONENT.search(framed.replace("\n", "\n/"))
    )


def check_link_target(what: str, path: str, target: str) -> None:
    """A symlink at ``path`` pointing to ``target`` resolves inside the prefix (lexically:
    what it would point to once installed)."""
    if not target or target.startswith("/") or "\\" in target or "\0" in target:
        raise _refuse(what, path, f"is a symlink to {target!r}, outside the prefix")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if joined == ".." or joined.startswith(("../", "/")):
        raise _refuse(what, path, f"is a symlink to {target!r}, outside the prefix")


def parse_paths(what: str, document: Any) -> list[PathEntry]:
    """The entries of an ``info/paths.json`` document, each checked with ``check_relative``;
    duplicates, unknown path types and malformed hashes, sizes and placeholders are refused.

    Every create reads every package's paths.json (~10^5 entries for a TF stack), so the
    entries are first made and checked in bulk (one regex search over all paths, one over all
    hashes, set operations); anything that bulk check does not pass is checked entry by entry,
    which raises the error naming the first bad entry (tests/test_pkgcache.py holds the two
    ways to the same verdicts)."""
    if not isinstance(document, dict) or not isinstance(document.get("paths"), list):
        raise _refuse(what, "paths", "is not a list")
    raws = document["paths"]
    try:
        out = [
            PathEntry(
                raw["_path"],
                raw.get("path_type", "hardlink"),
                raw.get("sha256"),
                raw.get("size_in_bytes"),
                raw.get("prefix_placeholder"),
                raw.get("file_mode"),
            )
            for raw in raws
        ]
        paths = [e.path for e in out]
        shas = [e.sha256 for e in out if e.sha256 is not None]
        if (
            all(isinstance(p, str) for p in paths)
            and len(set(paths)) == len(paths)
            and {e.path_type for e in out} <= PATH_TYPES
            and all(isinstance(sha, str) and len(sha) == 64 for sha in shas)
            and (not shas or _HEX.match("".join(shas)))
            and all(e.size is None or (isinstance(e.size, int) and e.size >= 0) for e in out)
            and all(_placeholder_ok(e) for e in out if e.placeholder is not None)
            and _all_relative(paths)
        ):
            return out
    except (TypeError, KeyError, AttributeError):  # not a mapping, unhashable values
        pass
    return _parse_paths_one_by_one(what, raws)


def _placeholder_ok(e: PathEntry) -> bool:
    return isinstance(e.placeholder, str) and bool(e.placeholder) and e.file_mode in MODES


MODES = (None, "text", "binary")


def _parse_paths_one_by_one(what: str, raws: list[Any]) -> list[PathEntry]:
    for raw in raws:
        if not isinstance(raw, dict) or not isinstance(raw.get("_path"), str):
            raise _refuse(what, repr(raw)[:80], "has no string _path")
    check_all_relative(what, [raw["_path"] for raw in raws])
    out: list[PathEntry] = []
    seen: set[str] = set()
    for raw in raws:
        path = raw["_path"]
        if path in seen:
            raise _refuse(what, path, "is listed twice")
        seen.add(path)
        kind = raw.get("path_type", "hardlink")
        if kind not in PATH_TYPES:
            raise _refuse(what, path, f"has path_type {kind!r}")
        sha, size = raw.get("sha256"), raw.get("size_in_bytes")
        if sha is not None and (not isinstance(sha, str) or not _HEX.match(sha) or len(sha) != 64):
            raise _refuse(what, path, "has a malformed sha256")
        if size is not None and (not isinstance(size, int) or size < 0):
            raise _refuse(what, path, "has a malformed size_in_bytes")
        placeholder = raw.get("prefix_placeholder")
        mode = raw.get("file_mode")
        if placeholder is not None and (
            not isinstance(placeholder, str) or not placeholder or mode not in MODES
        ):
            raise _refuse(what, path, "has a malformed prefix_placeholder or file_mode")
        out.append(PathEntry(path, kind, sha, size, placeholder, mode))
    return out


class EntrySummary(NamedTuple):
    """What a create needs of a checked cache entry, kept beside it (``<name>.checked.json``) so
    that a warm create reads a few hundred bytes per package instead of parsing its whole
    ``paths.json`` and walking its files again. Its fields are kept as they are read (lists),
    not made into sets: a warm create reads one per package and uses most of them once.

    ``links``: the listed paths that are symlinks once linked (listed as ``softlink``, or
    held as a symlink by the entry whatever paths.json calls them); ``parents``: every
    directory above a listed path (``check_links_across``); ``file_paths`` and
    ``file_inodes``: each listed path that the prefix gets as a hard link to the entry (a
    regular file listed as ``hardlink`` without a prefix placeholder) and the inode it has in
    the entry; ``other_inodes``: the entry's other regular files; ``size``: the listed bytes
    (for the progress bar); ``complete``: ``file_paths`` and ``links`` are all the listed
    paths, so a prefix that holds each file as its inode, and each link as a symlink, is
    proven without reading the record rattler wrote for the package
    (``create.check_installed``)."""

    links: Sequence[str]
    parents: Sequence[str]
    file_paths: Sequence[str]
    file_inodes: Sequence[int]
    other_inodes: Sequence[int]
    size: int
    complete: bool
    # every regular file of the entry (info/ included) with its size and mtime when it was
    # checked: an edit through a hard link changes them (``stamps_hold``)
    stamp_paths: Sequence[str] = ()
    stamp_sizes: Sequence[int] = ()
    stamp_mtimes: Sequence[int] = ()
    stamp_inodes: Sequence[int] = ()

    @property
    def files(self) -> Iterator[tuple[str, int]]:
        """Each plain file's path with its inode."""
        return zip(self.file_paths, self.file_inodes, strict=True)

    @property
    def inodes(self) -> frozenset[int]:
        """The inodes of all the entry's regular files when it was checked (a file of the new
        prefix with one of them is a hard link to a checked file)."""
        return frozenset(self.file_inodes).union(self.other_inodes)


SUMMARY = "summary.json"  # inside an entry
SUMMARY_FORMAT = 4


def summarize(directory: Path, entries: Sequence[PathEntry]) -> EntrySummary:
    """The ``EntrySummary`` of the extracted package at ``directory`` with these entries."""
    walked = {
        rel: found
        for rel, found in tree(os.fspath(directory)).items()
        if rel != "info" and not rel.startswith("info/")  # never linked
    }
    links = {e.path for e in entries if e.path_type == "softlink"}
    links.update(e.path for e in entries if walked.get(e.path, ("",))[0] == "link")
    files: list[tuple[str, int]] = []
    complete = True
    parents: set[str] = set()
    for e in entries:
        path = e.path
        found = walked.get(path)
        if path in links:
            pass
        elif (
            found is not None
            and found[0] == "file"
            and e.path_type == "hardlink"
            and e.placeholder is None
        ):
            files.append((path, found[1]))
        else:
            complete = False  # a directory entry, or a file rattler writes itself
        cut = path.rfind("/")
        while cut > 0:
            path = path[:cut]
            if path in parents:
                break  # and so are the directories above it
            parents.add(path)
            cut = path.rfind("/")
    plain = {inode for _, inode in files}
    others = {inode for kind, inode in walked.values() if kind == "file"} - plain
    stamp_paths, stamp_sizes, stamp_mtimes, stamp_inodes = [], [], [], []
    for rel, (kind, inode) in tree(os.fspath(directory)).items():
        if kind == "file":
            st = os.lstat(f"{directory}/{rel}")
            stamp_paths.append(rel)
            stamp_sizes.append(st.st_size)
            stamp_mtimes.append(st.st_mtime_ns)
            stamp_inodes.append(inode)
    return EntrySummary(
        links=sorted(links),
        parents=sorted(parents),
        file_paths=[path for path, _ in files],
        file_inodes=[inode for _, inode in files],
        other_inodes=sorted(others),
        size=sum(e.size or 0 for e in entries),
        complete=complete,
        stamp_paths=stamp_paths,
        stamp_sizes=stamp_sizes,
        stamp_mtimes=stamp_mtimes,
        stamp_inodes=stamp_inodes,
    )


def stamps_hold(directory: Path | str, summary: EntrySummary) -> bool:
    """Whether every file of the entry still has the size, mtime and inode it had when it was
    checked: one ``lstat`` per file, the cheap check before linking that keeps an edit made
    through a hard link (in some environment) from reaching the next one. A file edited
    without changing its size and mtime is left to ``verify``. (Runs over every file of a
    warm create: a plain loop over aligned lists.)"""
    lstat = os.lstat
    base = f"{directory}/"
    try:
        for rel, size, mtime, inode in zip(
            summary.stamp_paths,
            summary.stamp_sizes,
            summary.stamp_mtimes,
            summary.stamp_inodes,
            strict=True,
        ):
            st = lstat(base + rel)
            if st.st_ino != inode or st.st_size != size or st.st_mtime_ns != mtime:
                return False
    except (OSError, ValueError):  # a file gone; lists that do not align
        return False
    return True


def tree(root: str) -> dict[str, tuple[str, int]]:
    """Every entry under ``root`` by relative path: its kind (``dir``, ``file``, ``link`` or
    ``other``) and inode, from one ``scandir`` per directory; symlinks are not followed, so
    nothing under a symlinked directory is listed."""
    out: dict[str, tuple[str, int]] = {}
    stack = [("", root)]
    while stack:
        rel_dir, directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                rel = f"{rel_dir}{entry.name}"
                # most entries are files: asked first (the kinds come from d_type, no stat)
                if entry.is_file(follow_symlinks=False):
                    out[rel] = ("file", entry.inode())
                elif entry.is_dir(follow_symlinks=False):
                    out[rel] = ("dir", entry.inode())
                    stack.append((f"{rel}/", entry.path))
                elif entry.is_symlink():
                    out[rel] = ("link", entry.inode())
                else:
                    out[rel] = ("other", entry.inode())
    return out


def check_links_across(packages: Mapping[str, tuple[Path, EntrySummary]]) -> None:
    """Across the packages of one prefix, from their summaries (each with its entry's
    directory): no entry lies under a path that some package, itself included, installs as a
    symlink (rattler would create the file through the link, wherever it points), and so no
    symlink is also another package's directory. The error names the first entry under that
    symlink, read from the entry's paths.json."""
    links: dict[str, str] = {}
    for what, (_directory, summary) in packages.items():
        for link in summary.links:
            links.setdefault(link, what)
    if not links:
        return
    for what, (directory, summary) in packages.items():
        clash = links.keys() & summary.parents
        if not clash:
            continue
        parent = min(clash)
        under = sorted(
            e.path for e in read_paths(what, directory) if e.path.startswith(parent + "/")
        )
        raise _refuse(
            what,
            under[0] if under else parent + "/",
            f"lies under {parent!r}, a symlink ({links[parent]})",
        )


def _paths_signature(directory: Path | str) -> list[int] | None:
    """Inode, size, mtime and ctime of the entry's ``info/paths.json`` (or ``info/files``): a
    summary holds only for the file it was made from (extraction keeps the archive's mtime;
    any write, chmod or new hard link changes the ctime)."""
    for name in ("paths.json", "files"):
        try:
            st = os.stat(f"{directory}/info/{name}")  # noqa: PTH116 (for every entry)
        except OSError:
            continue
        return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return None


def summary_document(directory: Path, sha256: str, summary: EntrySummary) -> str:
    """The text of ``summary.json`` for the package extracted at ``directory``."""
    doc = {
        "format": SUMMARY_FORMAT,
        "sha256": sha256,
        "paths": _paths_signature(directory),
        "size": summary.size,
        "links": list(summary.links),
        "parents": list(summary.parents),
        "files": "\n".join(summary.file_paths),
        "file_inodes": list(summary.file_inodes),
        "inodes": list(summary.other_inodes),
        "complete": summary.complete,
        "stamp_paths": "\n".join(summary.stamp_paths),
        "stamp_sizes": list(summary.stamp_sizes),
        "stamp_mtimes": list(summary.stamp_mtimes),
        "stamp_inodes": list(summary.stamp_inodes),
    }
    return json.dumps(doc, separators=(",", ":"))


def read_summary(entry: Path | str, sha256: str) -> EntrySummary | None:
    """The summary kept in the entry ``entry`` when it was made for this archive (``sha256``)
    from the entry's current paths.json; None otherwise."""
    try:
        with open(f"{entry}/{SUMMARY}", "rb") as file:  # noqa: PTH123
            doc = json.loads(file.read())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(doc, dict)
        or doc.get("format") != SUMMARY_FORMAT
        or doc.get("sha256") != sha256
        or doc.get("paths") != _paths_signature(f"{entry}/{PACKAGE}")
    ):
        return None
    links, parents, others, size = (doc.get(k) for k in ("links", "parents", "inodes", "size"))
    paths, inodes, complete = (doc.get(k) for k in ("files", "file_inodes", "complete"))
    stamped, sizes, mtimes, stamp_inodes = (
        doc.get(k) for k in ("stamp_paths", "stamp_sizes", "stamp_mtimes", "stamp_inodes")
    )
    if not (
        isinstance(links, list)
        and isinstance(parents, list)
        and isinstance(others, list)
        and isinstance(inodes, list)
        and isinstance(paths, str)
        and isinstance(stamped, str)
        and isinstance(sizes, list)
        and isinstance(mtimes, list)
        and isinstance(stamp_inodes, list)
        and type(size) is int
        and isinstance(complete, bool)
        # in C, not a Python loop: an entry of a TF stack lists thousands of files
        and set(map(type, links)) <= {str}
        and set(map(type, parents)) <= {str}
        and set(map(type, inodes)) <= {int}
        and set(map(type, others)) <= {int}
        and set(map(type, sizes)) <= {int}
        and set(map(type, mtimes)) <= {int}
        and set(map(type, stamp_inodes)) <= {int}
    ):
        return None
    names = paths.split("\n") if paths else []
    stamp_names = stamped.split("\n") if stamped else []
    if len(names) != len(inodes) or not (
        len(stamp_names) == len(sizes) == len(mtimes) == len(stamp_inodes)
    ):
        return None
    return EntrySummary(
        links,
        parents,
        names,
        inodes,
        others,
        size,
        complete,
        stamp_names,
        sizes,
        mtimes,
        stamp_inodes,
    )


# ------------------------------------------------------------------------------------------
# Staging directories that clean up after dead processes


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


# ------------------------------------------------------------------------------------------
# The cache


Outcome = Literal["cached", "extracted", "downloaded"]


class CachedPackage(NamedTuple):
    directory: Path  # the extracted package: <root>/sha256/<sha256>/pkg
    sha256: str
    summary: EntrySummary  # of its checked paths.json
    outcome: Outcome
    name: str = ""  # <name>-<version>-<build>: its name in the lease's view (and conda-meta/)


class CacheInfo(NamedTuple):
    root: Path
    archive_sources: tuple[Path, ...]
    packages: int
    archives: int
    staging: int
    bytes: int
    locks: int = 0  # parsed locks kept in MEMO


def entry_name(pkg: Wanted) -> str:
    """``<name>-<version>-<build>``, refused unless each part is in conda's alphabet (a lock
    is untrusted input, and this becomes a path)."""
    for value, pattern, what in (
        (pkg.name, _NAME, "name"),
        (pkg.version, _VERSION, "version"),
        (pkg.build, _BUILD, "build"),
    ):
        if not pattern.match(value):
            raise UserInputError(
                f"the lock's package {what} {value!r} is not a conda {what}",
                "the lock is damaged or crafted; re-lock it",
            )
    return f"{pkg.name}-{pkg.version}-{pkg.build}"


def archive_name(pkg: Wanted) -> str:
    name = pkg.filename
    if not _ARCHIVE.match(name):
        raise UserInputError(
            f"{pkg.describe()}: {name!r} is not a conda archive file name",
            "the lock's url must end in <name>-<version>-<build>.tar.bz2 or .conda",
        )
    return name


def _digest(path: Path, algorithm: str) -> str:
    import hashlib  # ~1 ms of OpenSSL set-up that a warm create never needs

    h = hashlib.new(algorithm)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _expected(pkg: Wanted) -> tuple[str, str]:
    if pkg.sha256:
        return "sha256", pkg.sha256.lower()
    if pkg.md5:
        return "md5", pkg.md5.lower()
    raise ToolError(f"{pkg.describe()} has no hash in the lock", "re-lock: every package needs one")


_SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")
# envfactory <= 0.3 kept entries as <root>/<name>-<version>-<build> with .lock, .md5 and
# .checked.json beside them: never used now, removed by 'cache clean'
_LEGACY_ENTRY = re.compile(r"\A[A-Za-z0-9_].*-[^-/]+-[^-/]+(?:\.lock|\.md5|\.checked\.json)?\Z")
WAIT_S = 600.0  # the longest wait for a lock (each wait is reported as it goes)


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_private(path: Path, *, follow: bool) -> None:
    """Refuse a cache directory that another user owns or can write (group- or
    world-writable): such a user could plant entries that this user's creates would link, as
    ssh refuses a ``~/.ssh`` others can write. Windows hosts: left to the directory's ACL."""
    if not hasattr(os, "geteuid"):
        return
    st = path.stat() if follow else path.lstat()
    if not follow and stat.S_ISLNK(st.st_mode):
        raise ToolError(
            f"the package cache's {path} is a symbolic link",
            f"remove it (envfactory makes it again), or point {ENV_VAR} at another directory",
        )
    check_owned(path, st)


def check_owned(path: Path, st: os.stat_result) -> None:
    """``path`` (with its ``lstat``) is owned by this user and writable by no one else."""
    if not hasattr(os, "geteuid"):
        return
    me = os.geteuid()
    if st.st_uid != me:
        raise ToolError(
            f"the package cache's {path} is owned by {_user(st.st_uid)}, not by you "
            f"({_user(me)}); its entries could have been planted by that user",
            f"use a cache of your own: point {ENV_VAR} at a directory you own (the default "
            "is ~/.cache/envfactory/pkgs); users share archives through a read-only "
            f"directory in {ENV_VAR} or CONDA_PKGS_DIRS, never entries "
            "(docs/security.md, 'Another local user')",
        )
    if st.st_mode & 0o022:
        raise ToolError(
            f"the package cache's {path} is writable by other users "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); they could plant entries",
            f"chmod go-w {path}, or point {ENV_VAR} at a directory only you can write "
            "(docs/security.md, 'Another local user')",
        )


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def verify_file(pkg: Wanted, path: Path) -> None:
    """Raise unless ``path`` has the lock's sha256 (preferred) or md5 for ``pkg``."""
    if not archive_matches(pkg, path):
        algorithm = "sha256" if pkg.sha256 else "md5"
        raise ToolError(
            f"{pkg.describe()}: the {algorithm} of {path} differs from the lock's "
            f"{pkg.sha256 or pkg.md5}",
            "the package file changed after locking; re-lock from a channel you trust, "
            "or restore the original file",
        )


def archive_matches(pkg: Wanted, path: Path) -> bool:
    algorithm, expected = _expected(pkg)
    return _digest(path, algorithm) == expected


def local_path(url: str) -> Path | None:
    return host.file_url_path(url)


def workers() -> int:
    """About the core count: extraction is CPU-bound (bzip2, zstd)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


class OfflineError(ToolError):
    """A package could not be downloaded."""


class PackageCache:
    def __init__(self, location: CacheLocation | None = None) -> None:
        self.location = location or cache_location()
        self.root = self.location.root
        self.entries = self.root / ENTRIES
        self._local = threading.local()

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
            for sub in (ENTRIES, BY_MD5, STAGING, MEMO):
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
                    packages = sum(1 for p in child.iterdir() if _SHA256.match(p.name))
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
                    if _SHA256.match(child.name) and self._retire(child.name, wait=False):
                        removed += 1
        for child in sorted(self.root.iterdir()):
            # staging, parsed locks, the pip side (pipcache), the entries and md5 notes
            if child.name.startswith(".") or child.name in (ENTRIES, BY_MD5):
                continue
            archive = child.name.endswith((".tar.bz2", ".conda"))
            if extracted and not archive and _LEGACY_ENTRY.match(child.name):
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

    # -- archives ---------------------------------------------------------------------------

    def cached_archive(self, pkg: Wanted) -> Path | None:
        """A copy of ``pkg``'s archive with the lock's hash: in the cache, then in the read-only
        sources (conda's pkgs dirs). A cached archive with the wrong hash is removed."""
        name = archive_name(pkg)
        mine = self.root / name
        if mine.is_file() and not mine.is_symlink():
            if archive_matches(pkg, mine):
                return mine
            mine.unlink(missing_ok=True)
        for source in self.location.archive_sources:
            theirs = source / name
            if theirs.is_file() and archive_matches(pkg, theirs):
                return theirs
        return None

    def _session(self) -> Any:
        session = getattr(self._local, "session", None)
        if session is None:
            from envfactory.netconfig import conda_session

            session = conda_session()  # .condarc's proxy_servers and ssl_verify
            self._local.session = session
        return session

    def download(self, pkg: Wanted, staging: Path) -> Path:
        """Download ``pkg`` into ``staging`` and return the file; the hash is not checked yet."""
        import requests

        url = pkg.url
        if not url.startswith(("http://", "https://")):
            raise UserInputError(
                f"{pkg.describe()}: unsupported URL {url!r}", "a lock's URLs are http(s) or file://"
            )
        target = staging / archive_name(pkg)
        try:
            with self._session().get(url, stream=True, timeout=TIMEOUT_S) as response:
                response.raise_for_status()
                with target.open("wb") as handle:
                    for chunk in response.iter_content(CHUNK):
                        handle.write(chunk)
                        if _DOWNLOADED is not None:
                            with _DOWNLOADED.get_lock():
                                _DOWNLOADED.value += len(chunk)
        except requests.RequestException as exc:
            raise OfflineError(
                f"cannot download {url}: {exc}",
                "offline or behind a mirror? point the lock's channels at a mirror with "
                "--channel-map NAME=URL or ENVFACTORY_CHANNEL_MAP=NAME=URL,...; "
                "'envfactory mirror LOCK DIR' writes one on a machine that is online",
            ) from None
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise disk_full(f"downloading {url}", staging) from None
            raise
        return target

    # -- entries ----------------------------------------------------------------------------

    def _populate(self, pkg: Wanted) -> tuple[Outcome, int]:
        """Fetch the archive, check its hash, then its size against its paths.json, unpack it
        into a staging directory, check it (``check_extracted``) and publish it under its
        sha256 by one rename. A name that is taken meanwhile (another process filled the same
        archive) keeps the entry that is there. Returns the outcome and the listed bytes."""
        algorithm, expected = _expected(pkg)
        staging = Staging.make(self.root / STAGING, "")
        try:
            outcome: Outcome = "extracted"
            archive = self.cached_archive(pkg)
            downloaded = False
            if archive is None:
                local = local_path(pkg.url)
                if local is not None:
                    if not local.is_file():
                        raise ToolError(
                            f"{pkg.describe()}: {local} does not exist",
                            "check the channel map (--channel-map NAME=URL)",
                        )
                    archive = local
                else:
                    archive = self.download(pkg, staging.path)
                    downloaded, outcome = True, "downloaded"
            sha, md5 = unpack.digests(archive)  # before anything is unpacked
            found = sha if algorithm == "sha256" else md5
            if found != expected:
                raise ToolError(
                    f"{pkg.describe()}: {algorithm} of {pkg.url} is {found}, the lock says "
                    f"{expected}",
                    "the package file changed after locking; re-lock from a channel you "
                    "trust, or restore the original file",
                )
            target = self.entries / sha
            size = 0
            if not os.path.lexists(target):
                what = pkg.describe()
                unpack.check_bounds(what, archive)
                work = staging.path / "entry"
                work.mkdir()
                unpack.extract(what, archive, work / PACKAGE)
                unpack.normalize_modes(work / PACKAGE, current_umask())
                summary = check_extracted(pkg, work / PACKAGE)
                size = summary.size
                (work / RECORD).write_text(
                    json.dumps({"format": ENTRY_FORMAT, "sha256": sha, "md5": md5}) + "\n",
                    encoding="utf-8",
                )
                (work / SUMMARY).write_text(
                    summary_document(work / PACKAGE, sha, summary), encoding="utf-8"
                )
                work.chmod(0o777 & ~current_umask())
                try:
                    work.rename(target)
                except OSError as exc:
                    if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise
                    outcome = "cached"  # published by another process meanwhile
            write_cached(self.root / BY_MD5 / md5, sha + "\n")
            if downloaded:
                archive.replace(self.root / archive_name(pkg))
            return outcome, size
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise disk_full(f"filling the cache entry of {pkg.describe()}", self.root) from None
            raise
        finally:
            staging.remove()

    def _sha256_of(self, pkg: Wanted) -> str | None:
        """The sha256 of the locked archive: the lock's, or for an md5-only lock the one the
        cache noted when it filled the archive with that md5 (None when it did not)."""
        algorithm, expected = _expected(pkg)
        if algorithm == "sha256":
            return expected
        try:
            with open(self.root / BY_MD5 / expected, "rb") as handle:  # noqa: PTH123
                noted = handle.read(80).decode("ascii", "replace").strip()
        except OSError:
            return None
        return noted if _SHA256.match(noted) else None

    def _open_entry_lock(self, sha: str, what: str, report: CacheProgress) -> IO[bytes]:
        """The entry's lock file, shared-locked (waiting, and saying so, while ``cache clean``
        or a create retiring the entry holds it exclusively). The lock is held on the file
        that is at the path afterwards (clean removes lock files)."""
        path = f"{self.entries}/{sha}.lock"
        while True:
            handle = filelock.open_lock_file(path)
            try:

                def waiting(seconds: float) -> None:
                    report.waiting(
                        f"{what}: waiting {seconds:.0f} s for the cache entry {self.entries / sha}"
                        " (another process is removing it: 'cache clean' or a create that "
                        "found it damaged)"
                    )

                if not filelock.wait_lock(handle, shared=True, waiting=waiting, deadline_s=WAIT_S):
                    raise ToolError(
                        f"{what}: the cache entry {self.entries / sha} stayed locked by another "
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

    def _check_entry(
        self, pkg: Wanted, sha: str
    ) -> tuple[Literal["ok", "absent", "damaged"], EntrySummary | None]:
        """Whether the entry of ``sha`` can be linked for ``pkg`` (module docstring). An
        entry owned by another user, or writable by others, is refused; one whose archive is
        another package is refused (``check_index``)."""
        directory = self.entries / sha
        try:
            st = os.lstat(directory)
        except FileNotFoundError:
            return "absent", None
        check_owned(directory, st)
        try:
            record = json.loads((directory / RECORD).read_bytes())
        except (OSError, ValueError):
            return "damaged", None
        if not isinstance(record, dict) or record.get("sha256") != sha:
            return "damaged", None
        algorithm, expected = _expected(pkg)
        if algorithm == "md5" and record.get("md5") != expected:
            (self.root / BY_MD5 / expected).unlink(missing_ok=True)  # a stale note
            return "absent", None
        check_index(pkg, directory / PACKAGE)
        summary = read_summary(directory, sha)
        if summary is None or not stamps_hold(directory / PACKAGE, summary):
            return "damaged", None
        return "ok", summary

    def _retire(self, sha: str, *, wait: bool, report: CacheProgress | None = None) -> bool:
        """Remove the entry of ``sha`` once no create links from it (its lock exclusive):
        renamed into a staging directory first, so a kill -9 leaves nothing under its name,
        then removed. ``wait``: wait for the lock (saying so); otherwise skip an entry in use.
        True when it was removed."""
        path = f"{self.entries}/{sha}.lock"
        with filelock.open_lock_file(path) as handle:
            if wait:

                def waiting(seconds: float) -> None:
                    if report is not None:
                        report.waiting(
                            f"waiting {seconds:.0f} s for other creates to finish linking from "
                            f"the damaged cache entry {self.entries / sha}, to unpack it again"
                        )

                taken = filelock.wait_lock(handle, shared=False, waiting=waiting, deadline_s=WAIT_S)
                if not taken:
                    raise ToolError(
                        f"the damaged cache entry {self.entries / sha} stayed in use by other "
                        f"processes for {WAIT_S:.0f} s",
                        "let the creates that link from it finish, then run this again",
                    )
            elif not filelock.try_lock(handle, shared=False):
                return False
            staging = Staging.make(self.root / STAGING, "")
            try:
                with contextlib.suppress(FileNotFoundError):
                    (self.entries / sha).rename(staging.path / "retired")
                with contextlib.suppress(OSError):  # Windows: not while it is open
                    Path(path).unlink()  # still locked by us: a waiter re-opens (_open_entry_lock)
            finally:
                staging.remove()
        return True

    def acquire(self, packages: Sequence[Wanted], progress: CacheProgress | None = None) -> Lease:
        """Make sure every package is in the cache, checked; return a lease holding a shared
        lock on each entry until it is closed (so no process removes one meanwhile), with a
        view directory (``Lease.view``) that ``rattler.install`` links from.

        Entries already there cost a lock, a look and one ``lstat`` per file. The others are
        fetched, checked, unpacked and published by a bounded pool of worker processes
        (``workers()``; processes, because rattler's extraction holds the GIL); they take no
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
            _expected(pkg)
        self._prepare()
        report.start(len(packages))
        lease = Lease(self)
        outcomes: dict[int, Outcome] = {}
        try:
            for _attempt in range(4):
                lease.release()
                found, missing, damaged = self._take(packages, lease, report)
                if damaged:
                    lease.release()
                    for sha in sorted(damaged):
                        self._retire(sha, wait=True, report=report)
                    continue
                if not missing:
                    break
                lease.release()

                def landed(i: int, outcome: Outcome, size: int) -> None:
                    outcomes[i] = outcome
                    report.fetched(packages[i].name, size, outcome)

                self._fill(missing, packages, landed, getattr(report, "transferred", None))
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
            lease.make_view()
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
            handle = self._open_entry_lock(sha, pkg.describe(), report)
            lease.add(handle)
            state, summary = self._check_entry(pkg, sha)
            if state == "ok" and summary is not None:
                found[i] = (sha, summary)
            elif state == "damaged":
                damaged.add(sha)
            else:
                missing.append(i)
        return found, sorted(missing), damaged

    def _fill(
        self,
        indices: Sequence[int],
        packages: Sequence[Wanted],
        landed: Callable[[int, Outcome, int], None],
        transferred: Callable[[int], None] | None = None,
    ) -> None:
        """Populate the entries of ``packages[i]`` for each index in worker processes;
        ``landed(i, outcome, size)`` runs here as each one finishes, ``transferred(nbytes)``
        a few times a second while the workers download."""
        from concurrent.futures import FIRST_COMPLETED, Executor, wait

        # Only these are preloaded: the default would import __main__ (the CLI) again; the
        # second quiets the traceback of a worker forked for a create killed meanwhile.
        context = host.pool_context(["envfactory.cache.pkgcache", "envfactory.cache.orphaned"])
        downloaded = host.shared_counter(context) if transferred is not None else None
        reported = 0
        pool: Executor | None = None
        try:
            # all of the pool's workers start, or none do; a signal that came meanwhile is
            # raised as the block ends, where the pool is shut down below like any failure
            with interrupts_deferred():
                pool = host.worker_pool(
                    min(workers(), len(indices)),
                    context,
                    (_worker_init, (os.getpid(), downloaded)),
                    (_count_downloads, (downloaded,)),
                )
                with _main_not_reimported():
                    pending = {
                        pool.submit(_fill_one, self.location, packages[i]): i for i in indices
                    }
            while pending:
                # with a listener, wake up 4 times a second to tell it the bytes downloaded
                tick = 0.25 if downloaded is not None else None
                finished, _ = wait(pending, timeout=tick, return_when=FIRST_COMPLETED)
                if transferred is not None and downloaded is not None:
                    now = downloaded.value
                    if now > reported:
                        transferred(now - reported)
                        reported = now
                for future in finished:
                    i = pending.pop(future)
                    error = future.exception()
                    if error is not None:
                        raise ToolError(f"a package cache worker failed: {error}") from None
                    result = future.result()
                    if len(result) == 3:
                        raise _error_from(result)
                    landed(i, result[0], result[1])
        except BaseException:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


@contextlib.contextmanager
def _main_not_reimported() -> Iterator[None]:
    """While workers start: a ``__main__`` run as a script is not named to them, so they do not
    run it again (multiprocessing re-imports it in every worker, which runs a script without an
    ``if __name__ == "__main__"`` guard once more; the workers need nothing from it)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


# In a worker: the shared count of bytes downloaded, which the create's process reads for its
# progress bar (a multiprocessing Value, handed over as the worker starts).
_DOWNLOADED: Any = None


def _count_downloads(downloaded: Any) -> None:
    """Where ``_download`` adds the bytes it wrote (a counter the parent reads)."""
    global _DOWNLOADED
    _DOWNLOADED = downloaded


def _worker_init(parent: int, downloaded: Any = None) -> None:
    _count_downloads(downloaded)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles it and waits for us
    # started with them blocked (interrupts_deferred): SIGTERM and SIGHUP end a worker again
    host.unblock_interrupts()
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()


def _exit_with(parent: int) -> None:
    """End this worker when the create that started it is gone (kill -9): the worker is the
    forkserver's child, not the create's, and would otherwise wait for work for ever, holding
    the create's stdout and stderr open (whoever reads them would wait as long). A staging
    directory it leaves is removed by the next run (its marker's flock dies with it)."""
    host.wait_for_exit(parent)
    os._exit(1)


def _error_from(result: tuple[str, str, str | None]) -> Exception:
    kind, message, hint = result
    cls: type[Exception] = {
        "UnsafePackage": UnsafePackage,
        "OfflineError": OfflineError,
        "UserInputError": UserInputError,
        "SystemFailure": SystemFailure,
        "ArchiveTooLarge": unpack.ArchiveTooLarge,
    }.get(kind, ToolError)
    return cls(message, hint)


def _fill_one(
    location: CacheLocation, pkg: Wanted
) -> tuple[Outcome, int] | tuple[str, str, str | None]:
    """In a worker process: fill one entry (``PackageCache._populate``). Errors come back as
    (class name, message, hint): the error classes take a hint that pickling would drop."""
    from envfactory.errors import EnvfactoryError

    try:
        return PackageCache(location)._populate(pkg)
    except EnvfactoryError as exc:
        return (type(exc).__name__, exc.message, exc.hint)


def _windows_view_entry(entry: Path, link: Path) -> None:
    """A view's entry on a Windows host: a junction to the entry (no privilege needed, unlike
    a symlink); where the filesystem has none (wine's: "Request not supported"), the entry's
    tree again, each file a hard link to the entry's own (its inodes, which the post-link
    check knows)."""
    import _winapi

    try:
        _winapi.CreateJunction(str(entry), str(link))  # type: ignore[attr-defined,unused-ignore]
    except OSError:
        if os.path.lexists(link):  # the directory CreateJunction made before it failed
            link.rmdir()
        shutil.copytree(entry, link, symlinks=True, copy_function=os.link)


class Lease:
    """Shared locks on cache entries, held while a prefix links from them, and the view
    ``rattler.install`` links through (removed with the lease)."""

    def __init__(self, cache: PackageCache) -> None:
        self.cache = cache
        self.packages: list[CachedPackage] = []
        self._handles: list[IO[bytes]] = []
        self._guard = threading.Lock()
        self._view: Staging | None = None

    @property
    def view(self) -> Path:
        """A directory that holds each package as rattler's cache layout names it
        (``<name>-<version>-<build>``, a symlink to its entry's ``pkg/``, and beside it
        rattler's lock file with the archive's sha256): what ``rattler.install`` reads."""
        if self._view is None:
            raise ToolError("the cache's view was not made", "report this as a bug")
        return self._view.path

    def source(self, cached: CachedPackage) -> str:
        """The path rattler links ``cached`` from (and records in conda-meta/)."""
        return str(self.view / cached.name)  # native separators, as rattler records it

    def make_view(self) -> None:
        self._view = Staging.make(self.cache.root / STAGING, "view-")
        for cached in self.packages:
            link = self._view.path / cached.name
            if host.WINDOWS:
                _windows_view_entry(cached.directory, link)
            else:
                link.symlink_to(cached.directory)
            lock = struct.pack(">Q", LOCK_REVISION) + bytes.fromhex(cached.sha256)
            (self._view.path / f"{cached.name}.lock").write_bytes(lock)

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
        if self._view is not None:
            self._view.remove()
            self._view = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[CachedPackage]:
        return iter(self.packages)


def read_paths(what: str, directory: Path) -> list[PathEntry]:
    """The checked entries of an extracted package's ``info/paths.json`` (or, for packages
    older than paths.json, of ``info/files``: hard links without hashes)."""
    paths_json = directory / "info" / "paths.json"
    try:
        if paths_json.is_file():
            return parse_paths(what, json.loads(paths_json.read_text(encoding="utf-8")))
        files = (directory / "info" / "files").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UnsafePackage(
            f"{what}: cannot read its file list: {exc}", "the package is damaged; re-lock"
        ) from None
    return parse_paths(what, {"paths": [{"_path": f} for f in files if f]})


def check_index(pkg: Wanted, directory: Path) -> None:
    """The package's own ``info/index.json`` names the locked package: name, version, build
    and, where both say one, subdir. Checked when an entry is filled and each time it is used
    (entries are found by their archive's hash, which a lock can name under any name)."""
    what = pkg.describe()
    try:
        with open(f"{directory}/info/index.json", "rb") as handle:  # noqa: PTH123
            index = json.loads(handle.read())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UnsafePackage(f"{what}: no readable info/index.json: {exc}", "re-lock") from None
    if not isinstance(index, dict):
        raise UnsafePackage(f"{what}: info/index.json is not a JSON object", "re-lock")
    claimed = (index.get("name"), str(index.get("version")), index.get("build"))
    if claimed != (pkg.name, pkg.version, pkg.build):
        raise UnsafePackage(
            f"{what}: the archive says it is {' '.join(map(str, claimed))}",
            "the lock points at another package's file; re-lock from a channel you trust",
        )
    subdir, locked = index.get("subdir"), pkg.subdir or pkg.url.rsplit("/", 2)[-2]
    if subdir and locked and subdir != locked:
        raise UnsafePackage(
            f"{what}: the archive says it is built for {subdir}, the lock says {locked}",
            "the lock points at another platform's file; re-lock from a channel you trust",
        )


def check_extracted(pkg: Wanted, directory: Path) -> EntrySummary:
    """An extracted package before it enters the cache: its index.json names the locked
    package; every paths.json entry is safe (``parse_paths``), none lies under a symlink of the
    package (``check_links_across``: a symlink listed as a file counts), and its file matches:
    a regular file with the listed size and sha256, or a symlink that stays inside the prefix.
    Returns the entry's summary (``write_summary`` keeps it once the entry is in place)."""
    what = pkg.describe()
    check_index(pkg, directory)
    entries = read_paths(what, directory)
    for e in entries:
        if is_own_path(e.path):
            raise _refuse(
                what, e.path, "is one of envfactory's own paths (conda-meta/, its activation)"
            )
    links = {e.path: e for e in entries if e.path_type == "softlink"}
    # before any lstat below: one under a symlink would follow it
    summary = summarize(directory, entries)
    check_links_across({what: (directory, summary)})
    for e in entries:
        full = directory / e.path
        try:
            st = os.lstat(full)
        except OSError:
            raise UnsafePackage(
                f"{what}: paths.json lists {e.path!r}, the archive does not hold it",
                "the package is damaged or crafted; re-lock",
            ) from None
        if e.path in links:
            if not stat.S_ISLNK(st.st_mode):
                raise _refuse(what, e.path, "is listed as a symlink but is not one")
            check_link_target(what, e.path, str(full.readlink()))
            continue
        if stat.S_ISLNK(st.st_mode):
            # conda packages list symlinks as softlink; a symlink listed as a file would be
            # followed when linked: only one that stays inside is accepted.
            check_link_target(what, e.path, str(full.readlink()))
            continue
        if e.path_type == "directory":
            if not stat.S_ISDIR(st.st_mode):
                raise _refuse(what, e.path, "is listed as a directory but is not one")
            continue
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(what, e.path, "is not a regular file")
        if e.size is not None and st.st_size != e.size:
            raise UnsafePackage(
                f"{what}: {e.path} has {st.st_size} bytes, paths.json says {e.size}",
                "the package is damaged or crafted; re-lock",
            )
        if e.sha256 is not None and _digest(full, "sha256") != e.sha256:
            raise UnsafePackage(
                f"{what}: the sha256 of {e.path} differs from paths.json",
                "the package is damaged or crafted; re-lock",
            )
    return summary


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
