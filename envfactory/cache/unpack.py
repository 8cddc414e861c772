"""Unpacking a conda archive into a cache entry, bounded before a byte is written.

1. ``digests``: the archive's sha256 and md5 in one pass; the caller compares them with the
   lock's *before* anything is unpacked (an archive that differs from the lock is never
   opened as an archive);
2. ``check_bounds``: the archive's members, read without writing them (a ``.tar.bz2`` as one
   stream, in one pass; a ``.conda`` by py-rattler's section reader), against the package's
   own ``info/paths.json``: a member paths.json lists with a size must have that size, and
   what paths.json does not bound (unlisted members, entries without a size, the ``info/``
   section) may add up to ``SLACK_RATIO`` times the archive's size plus ``SLACK_BYTES``. The
   first member past a bound stops the read, so a 17 KB archive that would expand to
   gigabytes costs a few milliseconds and no disk;
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
    declares (module docstring, step 2); nothing is written. A ``.tar.bz2`` is read once, as
    one stream (``_bounds_in_one_pass``); py-rattler's section reader, which this falls back to
    (and which reads a ``.conda``'s small info/ member on its own), decompresses a
    ``.tar.bz2`` once per section and once more for paths.json."""
    budget = SLACK_RATIO * archive.stat().st_size + SLACK_BYTES
    if archive.name.endswith(".tar.bz2") and _bounds_in_one_pass(what, archive, budget):
        return
    _bounds_by_section(what, archive, budget)


def _declared_sizes(raw: bytes | None) -> dict[str, int | None]:
    """Each path paths.json lists, with its size where it declares one (malformed: none;
    ``check_extracted`` refuses it with its own message)."""
    declared: dict[str, int | None] = {}
    if raw is None:
        return declared
    try:
        for item in json.loads(raw).get("paths", []):
            size = item.get("size_in_bytes")
            declared[str(item["_path"])] = size if isinstance(size, int) else None
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}
    return declared


def _charge(what: str, name: str, size: int, declared: dict[str, int | None], budget: int) -> int:
    """The budget left after the member ``name`` of ``size`` bytes (a member of the package,
    not of info/): one paths.json lists with a size must have that size and costs nothing;
    any other is charged."""
    bound = declared.get(name)
    if bound is not None:
        if size != bound:
            raise _too_large(what, name, f"holds {size} bytes, paths.json declares {bound}")
        return budget
    budget -= size
    if budget < 0:
        raise _too_large(
            what,
            name,
            f"({size} bytes) is not bounded by paths.json and passes the "
            f"{SLACK_RATIO}x-the-archive allowance",
        )
    return budget


def _charge_info(what: str, name: str, size: int, budget: int) -> int:
    budget -= size
    if budget < 0:
        raise _too_large(
            what,
            name,
            f"({size} bytes) brings the info/ section past the {SLACK_RATIO}x-the-archive "
            "allowance",
        )
    return budget


def _bounds_in_one_pass(what: str, archive: Path, budget: int) -> bool:
    """The bounds of a ``.tar.bz2`` in one read of its stream, the way the section reader
    applies them, when the archive holds its info/ members (paths.json among them) before the
    package's (conda-build writes them first). False, having charged nothing it could not
    know, when a package member comes before paths.json: the caller then reads by section."""
    import tarfile

    declared: dict[str, int | None] | None = None
    try:
        with tarfile.open(archive, "r|bz2", bufsize=CHUNK) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                name, size = member.name, member.size
                if name.startswith("info/"):
                    budget = _charge_info(what, name, size, budget)
                    if name == "info/paths.json":
                        handle = tar.extractfile(member)
                        declared = _declared_sizes(handle.read() if handle else None)
                    continue
                if declared is None:
                    return False  # a package member before paths.json
                budget = _charge(what, name, size, declared, budget)
    except ArchiveTooLarge:
        raise
    except (tarfile.TarError, OSError, EOFError, ValueError):
        return False  # the section reader says what is wrong with it, in rattler's words
    return declared is not None


def _bounds_by_section(what: str, archive: Path, budget: int) -> None:
    """The bounds read by py-rattler's section reader: info/ first, then the package."""
    import asyncio

    from rattler.package_streaming import PackageArchive

    async def run() -> None:
        nonlocal budget
        package = await PackageArchive.from_path(archive)
        async for entry in package.stream("info"):
            if entry.is_file:
                budget = _charge_info(what, entry.name, entry.size, budget)
        declared = _declared_sizes(await package.read_file("info/paths.json"))
        async for entry in package.stream("pkg"):
            if entry.is_file:
                budget = _charge(what, entry.name, entry.size, declared, budget)

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
