"""The records a lock is made of: the lock as read (``LockFile``), one locked package (a conda
artifact or a pip wheel) and the name of a dependency string, and the lock format's constants.
Every stage that reads or writes a lock shares these."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal, NamedTuple

from envfactory.catalog.platforms import Platform
from envfactory.lockfile.record import LockMetadata

Manager = Literal["conda", "pip"]

#: the lock's file name (conda-lock's default, which ``conda-lock install`` looks for)
LOCK_FILE = "conda-lock.yml"
#: the hint of every error about a lock that cannot be used as it is
LOCK_HINT = (
    "regenerate it with 'envfactory lock' (a lock from a pull request is untrusted input; "
    "see docs/security.md)"
)


class LockedPackage(NamedTuple):
    """One package of a lock: a conda artifact or a pip wheel, with the hashes to check it by."""

    manager: Manager
    name: str
    version: str
    platform: Platform
    url: str
    build: str = ""
    build_number: int = 0
    subdir: str = ""
    channel: str = ""
    md5: str | None = None
    sha256: str | None = None
    depends: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1].split("#", 1)[0]

    @property
    def key(self) -> tuple[str, str]:
        return (self.manager, self.name)

    def describe(self) -> str:
        if self.manager == "pip":
            return f"{self.name} {self.version} (pip)"
        return f"{self.name} {self.version} {self.build}"


def dependency_name(spec: str) -> str:
    """The package name of a conda dependency string such as ``numpy >=1.16,<2``."""
    return re.split(r"[\s=<>!~\[]", spec.strip(), maxsplit=1)[0]


class LockFile(NamedTuple):
    """A lock as ``lockfile.read.read_lock`` returns it: validated, its packages in conda-lock's
    order, and envfactory's record parsed once (``metadata``; empty for a third party's lock)."""

    packages: tuple[LockedPackage, ...]
    platforms: tuple[Platform, ...]
    channels: tuple[str, ...]
    content_hash: Mapping[str, str]
    metadata: LockMetadata
