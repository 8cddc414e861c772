"""Unpacking a conda archive into a cache entry, bounded before a byte is written.

1. ``digests``: the archive's sha256 and md5 in one pass; the caller compares them with the
   lock's *before* anything is unpacked (an archive that differs from the lock is never
   opened as an archive);
2. ``check_bounds``: the archive's members, read by py-rattler's streaming reader without
   writing them, against the package's own ``info/paths.json``: a member paths.json lists
   with a size must have that size, and what paths.json does not bound (unlisted members,
   entries without a size, the ``info/`` section) may add up to ``SLACK_RATIO`` times the
   archive's size plus ``SLACK_BYTES``. The first member past a bound stops the read, so a
   17 KB archive that would expand to gigabytes costs a few milliseconds and no disk;
3. ``extract``: py-rattler's extraction (``rattler.package_streaming.extract``);
4. ``normalize_modes``: every member's mode under the umask (0644/0755 under umask 022),
   set-uid, set-gid and sticky bits dropped: the archive's 0666/0777 do not survive.

Errors by errno: a full disk while unpacking is "disk full" with the directory (exit 2), not
"the archive is damaged".
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path

from envfactory.errors import SystemFailure, ToolError

CHUNK = 1 << 20
SLACK_RATIO = 64
SLACK_BYTES = 1 << 20
_OS_ERROR = re.compile(r"\(os error (\d+)\)")


class ArchiveTooLarge(ToolError):
    """An archive whose members exceed what its paths.json declares."""


def digests(path: Path) -> tuple[str, str]:
    """The sha256 and md5 of a file, in one read."""
    import hashlib

    sha, md5 = hashlib.sha256(), hashlib.md5()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            sha.update(block)
            md5.update(block)
    return sha.hexdigest(), md5.hexdigest()


def file_digest(path: Path | str, algorithm: str) -> str:
    """The hex digest of a file (``sha256``, ``md5``)."""
    import hashlib  # ~1 ms of OpenSSL set-up that a warm create never needs

    h = hashlib.new(algorithm)
    with open(path, "rb") as handle:  # noqa: PTH123 (a str path: runs once per checked file)
        for block in iter(lambda: handle.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def os_error_of(message: str) -> int | None:
    """The errno a py-rattler error message carries (``... (os error 28)``), if any."""
    found = _OS_ERROR.findall(message)
    return int(found[-1]) if found else None


def disk_full(doing: str, where: Path | str) -> SystemFailure:
    return SystemFailure(
        f"disk full: no space left on the device of {where} while {doing}",
        f"free space there (df {where}), or point ENVFACTORY_PKGS_DIRS (the package cache) "
        "or -p (the environment) at another disk; nothing half-written was kept",
    )


def _too_large(what: str, member: str, why: str) -> ArchiveTooLarge:
    return ArchiveTooLarge(
        f"{what}: refused before unpacking: {member} {why}",
        "the archive expands beyond what its own paths.json declares (crafted or damaged); "
        "nothing was unpacked; re-lock from a channel you trust",
    )


def check_bounds(what: str, archive: Path) -> None:
    """Raise ``ArchiveTooLarge`` when the archive's members exceed what its paths.json
    declares (module docstring, step 2); nothing is written."""
    import asyncio

    from rattler.package_streaming import PackageArchive

    budget = SLACK_RATIO * archive.stat().st_size + SLACK_BYTES

    async def run() -> None:
        nonlocal budget
        package = await PackageArchive.from_path(archive)
        async for entry in package.stream("info"):
            if entry.is_file:
                budget -= entry.size
                if budget < 0:
                    raise _too_large(
                        what,
                        entry.name,
                        f"({entry.size} bytes) brings the info/ section past the "
                        f"{SLACK_RATIO}x-the-archive allowance",
                    )
        raw = await package.read_file("info/paths.json")
        declared: dict[str, int | None] = {}
        if raw is not None:
            try:
                doc = json.loads(raw)
                for item in doc.get("paths", []):
                    size = item.get("size_in_bytes")
                    declared[str(item["_path"])] = size if isinstance(size, int) else None
            except (ValueError, TypeError, KeyError, AttributeError):
                declared = {}  # check_extracted refuses it with its own message
        async for entry in package.stream("pkg"):
            if not entry.is_file:
                continue
            name = entry.name
            size = declared.get(name)
            if size is not None:
                if entry.size != size:
                    raise _too_large(
                        what, name, f"holds {entry.size} bytes, paths.json declares {size}"
                    )
                continue
            budget -= entry.size
            if budget < 0:
                raise _too_large(
                    what,
                    name,
                    f"({entry.size} bytes) is not bounded by paths.json and passes the "
                    f"{SLACK_RATIO}x-the-archive allowance",
                )

    try:
        asyncio.run(run())
    except ArchiveTooLarge:
        raise
    except Exception as exc:  # rattler raises its own types, not one base class
        raise ToolError(
            f"{what}: cannot read {archive.name} as a conda archive: {exc}",
            "the locked archive itself is damaged; re-lock from a channel you trust",
        ) from None


def extract(what: str, archive: Path, destination: Path) -> None:
    from rattler.package_streaming import extract as rattler_extract

    try:
        rattler_extract(archive, destination)
    except Exception as exc:  # rattler raises its own types, not one base class
        code = getattr(exc, "errno", None) or os_error_of(str(exc))
        if code in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(f"unpacking {archive.name}", destination.parent) from None
        raise ToolError(
            f"{what}: cannot extract {archive.name}: {exc}",
            "the locked archive itself is damaged; re-lock from a channel you trust",
        ) from None


def normalize_modes(directory: Path, umask: int) -> None:
    """Every file and directory under ``directory`` (symlinks left alone) gets the mode the
    umask gives: 0o666 or, with any execute bit, 0o777, and 0o777 for directories, less the
    umask; set-uid, set-gid and sticky bits go."""
    file_mode, exec_mode = 0o666 & ~umask, 0o777 & ~umask
    stack = [os.fspath(directory)]
    os.chmod(directory, exec_mode)  # noqa: PTH101
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    continue
                if stat.S_ISDIR(st.st_mode):
                    want = exec_mode
                    stack.append(entry.path)
                else:
                    want = exec_mode if st.st_mode & 0o111 else file_mode
                if stat.S_IMODE(st.st_mode) != want:
                    os.chmod(entry.path, want)  # noqa: PTH101
