"""The safety of a package's files, before and after linking: one place for every check of
``info/paths.json`` (untrusted: it comes from an archive a lock names; docs/security.md).

Before an entry enters the cache (``check_extracted``): its ``info/index.json`` names the locked
package (``check_index``, also each time the entry is used); every ``paths.json`` entry is a
relative path that stays inside the prefix on every platform (``parse_paths``), none is one of
envfactory's own paths, each file has the listed size and sha256, each symlink points inside.
Across the packages of a prefix (``check_links_across``): no file under another one's symlink.
After rattler linked (``check_installed``): every installed file is the cache's own inode or has
the listed hash, every symlink points inside, nothing is missing or extra in ``conda-meta/``.

Checks that run over every file of a TF stack (~10^5 paths) have a bulk form (one regex search
over all paths, set operations) and fall back to the one-by-one form only to name the first bad
entry; tests/test_pkgcache.py holds the two to the same verdicts.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from envfactory.cache.layout import Wanted
from envfactory.cache.summary import EntrySummary, tree
from envfactory.cache.unpack import file_digest
from envfactory.errors import ToolError
from envfactory.ownfiles import is_own_path

OWN_RECORD = "envfactory.json"  # conda-meta/envfactory.json: create's own, not rattler's
_HEX = re.compile(r"\A[0-9a-f]+\Z")
PATH_TYPES = frozenset({"hardlink", "softlink", "directory"})
# words a refusal of one path (_why_outside)
_DRIVE_OR_CONTROL = re.compile(r"\A[A-Za-z]:|[\x00-\x1f]")
# The check of many paths joined by line breaks (_all_relative): substring tests
# and searches that start at one literal character, which re finds quickly; one regex with
# alternatives anchored at every line start took 3x as long (~10^5 paths per TF stack).
_ANY_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")  # every control character but the break
_ANY_DRIVE = re.compile(r"^[A-Za-z]:", re.MULTILINE)
_ANY_DOT_COMPONENT = re.compile(r"/\.\.?(?:/|\n)")  # in "\n/" + line + ... + "\n/"


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
    check_all_relative(what, [path])


def check_all_relative(what: str, paths: Sequence[str]) -> None:
    """``check_relative`` of every path, in one regex search over all of them (a package's
    paths are checked on every create: one search instead of two per file); when the search
    finds something, the same rule is applied to each path on its own, so the error names the
    first bad one. (One rule, ``_all_relative``; ``_why_outside`` only words the refusal.)"""
    if not paths or _all_relative(paths):
        return
    for path in paths:
        if not _all_relative([path]):
            raise _refuse(what, path, _why_outside(path))
    raise _refuse(what, paths[0], "is not a relative path inside the prefix")  # not reached


def _why_outside(path: str) -> str:
    """Why ``_all_relative`` refuses the one path ``path``, in words."""
    if not path or path.startswith("/") or "\\" in path:
        return "is empty, absolute or holds a backslash"
    if _DRIVE_OR_CONTROL.search(path):
        return "names a drive or holds a control character"
    return "has an empty, '.' or '..' component"


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
    return parse_paths_one_by_one(what, raws)


def _placeholder_ok(e: PathEntry) -> bool:
    return isinstance(e.placeholder, str) and bool(e.placeholder) and e.file_mode in MODES


MODES = (None, "text", "binary")


def parse_paths_one_by_one(what: str, raws: list[Any]) -> list[PathEntry]:
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


def check_index(pkg: Wanted, directory: Path | str) -> None:
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
        if e.sha256 is not None and file_digest(full, "sha256") != e.sha256:
            raise UnsafePackage(
                f"{what}: the sha256 of {e.path} differs from paths.json",
                "the package is damaged or crafted; re-lock",
            )
    return summary


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


# ------------------------------------------------------------------------------------------
# After linking


def file_inodes(root: str) -> set[int]:
    """The inodes of the regular files under ``root`` (symlinks not followed)."""
    return {inode for kind, inode in tree(root).values() if kind == "file"}


class Linked(NamedTuple):
    """What a package of the new prefix was linked from: the cache entry's directory and, when
    the caller has it, the entry's summary (``EntrySummary``; without one the entry
    is walked here)."""

    source: str
    summary: EntrySummary | None = None


def check_installed(prefix: Path, linked: Mapping[str, Linked]) -> None:
    """Every file the conda packages installed: inside the prefix and under no symlink; a file
    is the cache's (a hard link to a file of the entry it was linked from, checked on its way
    in) or has the listed sha256 and size (``sha256_in_prefix`` where the prefix was patched
    in); a symlink points inside the prefix. ``linked`` holds each package by the name of the
    record rattler writes for it in ``conda-meta/`` (``<name>-<version>-<build>``); a record
    of anything else, or a package without one, is an error.

    The prefix is walked once with ``scandir`` (``summary.tree``: the kind and inode of every
    entry come with the directory listing), not one ``lstat`` per file: this runs on every
    create, over every file of the environment. A package whose summary is ``complete`` is
    proven from the summary alone when every listed file is at its path as the inode it has in
    the entry and every listed symlink is a symlink pointing inside the prefix; its record is
    not read (most packages, most of the bytes of ``conda-meta/``). Any other package, and one
    that differs in any way, is checked path by path against its record (written by rattler
    from ``paths.json``)."""
    meta = prefix / "conda-meta"
    names = {p.name[:-5] for p in meta.iterdir() if p.suffix == ".json" and p.name != OWN_RECORD}
    if names - linked.keys():
        raise ToolError(
            f"conda-meta/{min(names - linked.keys())}.json: a record of a package that create "
            "did not link",
            "report this as a bug in envfactory",
        )
    if linked.keys() - names:
        raise ToolError(
            f"conda-meta/ has no record of {min(linked.keys() - names)} after linking",
            "report this as a bug in envfactory",
        )
    root = os.fspath(prefix)
    installed = tree(root)  # relative path -> (kind, inode), real directories only
    device = prefix.stat().st_dev
    devices: dict[str, int] = {}  # the device of each cache directory
    for name, (source, summary) in linked.items():
        parent = source.rpartition("/")[0]
        if parent not in devices:
            devices[parent] = Path(parent).stat().st_dev
        linkable = devices[parent] == device  # elsewhere rattler copies: no inode is the entry's
        if (
            linkable
            and summary is not None
            and summary.complete
            and _proven(root, installed, name, summary)
        ):
            continue
        path = meta / f"{name}.json"
        try:
            record = json.loads(path.read_bytes())
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise ToolError(
                f"conda-meta/{path.name} is not a record rattler wrote (not a JSON object)",
                "report this as a bug in envfactory",
            )
        recorded = record.get("extracted_package_dir") or (record.get("link") or {}).get("source")
        if recorded is None or os.fspath(Path(recorded)) != os.fspath(Path(source)):
            raise ToolError(
                f"{path.name}: linked from {recorded}, not from the checked cache entry",
                "report this as a bug in envfactory",
            )
        if not linkable:
            inodes: frozenset[int] | set[int] = set()
        elif summary is not None:
            inodes = summary.inodes
        else:
            inodes = file_inodes(source)
        _check_record(root, installed, record, inodes)


def _proven(
    root: str, installed: Mapping[str, tuple[str, int]], name: str, summary: EntrySummary
) -> bool:
    """Whether the prefix holds the package exactly as its entry's summary lists it: each file
    at its path as the entry's inode, each symlink a symlink (pointing inside the prefix: an
    error otherwise)."""
    for rel, inode in summary.files:
        if installed.get(rel) != ("file", inode):
            return False
    for rel in summary.links:
        found = installed.get(rel)
        if found is None or found[0] != "link":
            return False
        check_link_target(name, rel, os.readlink(f"{root}/{rel}"))  # noqa: PTH115
    return True


def _check_record(
    root: str,
    installed: Mapping[str, tuple[str, int]],
    record: Mapping[str, Any],
    linked: frozenset[int] | set[int],
) -> None:
    """The paths of one record in ``conda-meta/`` against the prefix (``installed``); a
    regular file whose inode is in ``linked`` is the cache entry's own."""
    what = f"{record['name']} {record['version']} {record['build']}"
    entries = (record.get("paths_data") or {}).get("paths", [])
    check_all_relative(what, [raw["_path"] for raw in entries])
    for raw in entries:
        rel = raw["_path"]
        found = installed.get(rel)
        if found is None:
            parent = rel.rpartition("/")[0]
            while parent and parent not in installed:
                parent = parent.rpartition("/")[0]
            if parent and installed[parent][0] != "dir":
                raise UnsafePackage(
                    f"{parent} in the new prefix is not a directory but {what} has files under it",
                    "a package installs a symlink where another has a directory; re-lock",
                )
            raise UnsafePackage(f"{what}: {rel} is missing after linking", "report this as a bug")
        kind, inode = found
        path_type = raw.get("path_type", "hardlink")
        if (
            kind == "file"
            and path_type == "hardlink"
            and inode in linked
            and not raw.get("prefix_placeholder")
        ):
            continue  # the cache's own file (most of them): checked on its way in
        full = f"{root}/{rel}"  # plain strings: this runs once per installed file
        if path_type == "softlink":
            if kind != "link":
                raise UnsafePackage(f"{what}: {rel} should be a symlink", "re-lock")
            check_link_target(what, rel, os.readlink(full))  # noqa: PTH115
            continue
        if path_type == "directory":
            if kind != "dir":
                raise UnsafePackage(f"{what}: {rel} should be a directory", "re-lock")
            continue
        if kind == "link":
            check_link_target(what, rel, os.readlink(full))  # noqa: PTH115
            continue
        if kind != "file":
            raise UnsafePackage(f"{what}: {rel} is not a regular file after linking", "")
        if path_type != "hardlink":
            continue  # python entry points, .pyc: written by rattler, not in paths.json
        if raw.get("prefix_placeholder"):
            expected = raw.get("sha256_in_prefix") or raw.get("sha256")
        else:
            expected = raw.get("sha256")
            size = raw.get("size_in_bytes")
            st = os.lstat(full)
            if size is not None and st.st_size != size:
                raise UnsafePackage(
                    f"{what}: {rel} has {st.st_size} bytes after linking, paths.json says {size}",
                    "the cache entry changed; 'envfactory cache clean' and run again",
                )
        if expected and file_digest(full, "sha256") != expected:
            raise UnsafePackage(
                f"{what}: the sha256 of {rel} after linking differs from paths.json",
                "the cache entry changed; 'envfactory cache clean' and run again",
            )
