"""The records a lock is made of: one locked package (a conda artifact or a pip wheel) and the
name of a dependency string. Every stage that reads or writes a lock shares these."""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from envfactory.catalog.platforms import Platform

Manager = Literal["conda", "pip"]


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
