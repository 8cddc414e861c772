"""Where the package cache lives, how its entries are named, and whose they may be.

The layout (``PackageCache``'s docstring has what each path holds): ``<root>/sha256/<sha256>/``
entries, ``<root>/md5/<md5>`` notes, ``<root>/<file>`` archives, ``<root>/.staging/`` work in
progress, ``<root>/.locks/`` parsed locks. The root: the first directory of
``ENVFACTORY_PKGS_DIRS``, else ``$XDG_CACHE_HOME/envfactory/pkgs``; further
``ENVFACTORY_PKGS_DIRS`` entries and ``CONDA_PKGS_DIRS`` are read-only sources of archives.

A lock is untrusted input: every name that becomes a path under the cache is checked against
conda's alphabets here (``entry_name``, ``archive_name``), and the cache's directories must be
this user's alone (``check_private``).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

from envfactory import host
from envfactory.errors import ToolError, UserInputError

ENV_VAR = "ENVFACTORY_PKGS_DIRS"
CONDA_ENV_VAR = "CONDA_PKGS_DIRS"
STAGING = ".staging"
MEMO = ".locks"  # parsed locks by the sha256 of their text (lockfile.load_document)
ENTRIES = "sha256"  # <root>/sha256/<archive sha256>/: one immutable entry per archive
VIEWS = "views"  # <root>/views/<key>/: rattler's cache layout over a set of entries (lease)
BY_MD5 = "md5"  # <root>/md5/<archive md5>: the sha256 of that archive
PACKAGE = "pkg"  # an entry's extracted package
RECORD = "entry.json"  # an entry's own record: the archive's hashes
ENTRY_FORMAT = 1

# conda's name/version/build alphabets (conda.models.match_spec, conda-build's checks), with the
# archive suffixes rattler extracts. A cache entry's name is built from these: nothing else gets
# into a path under the cache.
_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+\-]*\Z")
_VERSION = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+!*\-]*\Z")
_BUILD = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+\-]*\Z")
_ARCHIVE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+!\-]*\.(?:tar\.bz2|conda)\Z")


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


def default_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if host.WINDOWS:
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


Outcome = Literal["cached", "extracted", "downloaded"]  # how a package came into the cache


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


def expected_hash(pkg: Wanted) -> tuple[str, str]:
    if pkg.sha256:
        return "sha256", pkg.sha256.lower()
    if pkg.md5:
        return "md5", pkg.md5.lower()
    raise ToolError(f"{pkg.describe()} has no hash in the lock", "re-lock: every package needs one")


SHA256_NAME = re.compile(r"\A[0-9a-f]{64}\Z")
# envfactory <= 0.3 kept entries as <root>/<name>-<version>-<build> with .lock, .md5 and
# .checked.json beside them: never used now, removed by 'cache clean'
LEGACY_ENTRY = re.compile(r"\A[A-Za-z0-9_].*-[^-/]+-[^-/]+(?:\.lock|\.md5|\.checked\.json)?\Z")
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
            f"the package cache's {path} is owned by {host.user_name(st.st_uid)}, not by you "
            f"({host.user_name(me)}); its entries could have been planted by that user",
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
