"""An entry's summary: what a create needs of a checked cache entry, kept beside it
(``<entry>/summary.json``), so that a warm create reads a few hundred bytes per package instead
of parsing its whole ``paths.json`` and walking its files again; and the stamps (size, mtime,
inode of every file) that show an entry was not edited through a hard link since it was checked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from envfactory.cache.layout import PACKAGE


class EntrySummary(NamedTuple):
    """What a create needs of a checked cache entry, kept in its entry (``summary.json``) so
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


def paths_signature(directory: Path | str) -> list[int] | None:
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
        "paths": paths_signature(directory),
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
        or doc.get("paths") != paths_signature(f"{entry}/{PACKAGE}")
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
