"""Where a wheel goes in an environment, as pip would install it with that environment's own
interpreter (without running that interpreter), and the checks a wheel passes first: the
adapter for the ``installer`` library
(PyPI ``installer``, the reference implementation of the wheel binary format's install steps,
https://installer.pypa.io; pip and uv implement the same steps).

``installer`` is used rather than ``pip --target`` (which puts console scripts under
``site-packages/bin`` with envfactory's own interpreter in their shebang) and rather than pip
with the environment's interpreter (which would run a program from the new prefix at
``create``; docs/security.md). It takes the scheme as a plain mapping, so a win-64 prefix is
laid out on Linux too, and it carries the Windows ``.exe`` launchers.

The scheme is sysconfig's ``posix_prefix`` (linux-64) or ``nt`` (win-64) for the prefix, what
the environment's Python reports as ``sysconfig.get_paths()``: ``lib/pythonX.Y/site-packages``,
``bin``, ``include/pythonX.Y/<name>`` and the prefix itself for ``.data/data``; on Windows
``Lib\\site-packages``, ``Scripts``, ``Include\\<name>``. Scripts get a shebang (Windows: a
launcher) naming the environment's ``python`` at its final prefix, as pip writes
``sys.executable``. ``RECORD`` lists every file with its sha256, relative to site-packages;
``INSTALLER`` says ``envfactory``; ``REQUESTED`` marks what the lock's requirements named
(PEP 376); ``direct_url.json`` (PEP 610) is written for a requirement that named a URL.

The files are laid out by ``wheeltree`` from the wheel's unpacked form in the package cache.
Before a wheel is unpacked its own ``METADATA`` (Name, Version) must be the lock's
record and every member must match the wheel's ``RECORD`` (installer's ``validate_record``); a
file that already exists in the prefix (a conda package's: its inode is the package cache's) is
never written through.
"""

from __future__ import annotations

import os
from pathlib import Path, PureWindowsPath
from typing import NamedTuple

from envfactory.catalog.platforms import Platform, os_of
from envfactory.errors import ToolError
from envfactory.lockfile.models import LockedPackage

INSTALLER_NAME = b"envfactory\n"


class InstallScheme(NamedTuple):
    """Where a wheel's parts go in one prefix, and the interpreter its scripts name."""

    purelib: Path
    scripts: Path
    headers: Path  # the parent: pip adds the distribution's name
    data: Path
    interpreter: str
    script_kind: str  # installer's launcher kind: "posix" or "win-amd64"


def python_path(prefix: Path, platform: Platform) -> str:
    """The environment's ``python`` at its final prefix (what pip writes as ``sys.executable``).
    A win-64 prefix laid out on a POSIX host is named through drive ``Z:``, which wine maps to
    ``/`` (the only way such a prefix runs here)."""
    if os_of(platform) != "windows":
        return f"{prefix}/bin/python"
    if os.name == "nt":  # pragma: no cover - Windows host
        return str(prefix / "python.exe")
    return str(PureWindowsPath("Z:\\", *prefix.parts[1:], "python.exe"))


def scheme(staging: Path, final: Path, platform: Platform, python: str) -> InstallScheme:
    """The install scheme of a prefix being built in ``staging`` that will live at ``final``."""
    if os_of(platform) == "windows":
        return InstallScheme(
            staging / "Lib" / "site-packages",
            staging / "Scripts",
            staging / "Include",
            staging,
            python_path(final, platform),
            "win-amd64",
        )
    return InstallScheme(
        staging / "lib" / f"python{python}" / "site-packages",
        staging / "bin",
        staging / "include" / f"python{python}",
        staging,
        python_path(final, platform),
        "posix",
    )


def check_metadata(wheel: Path, pkg: LockedPackage) -> None:
    """Raise unless the wheel's ``METADATA`` names the lock's package and version, and every
    member matches the wheel's ``RECORD``."""
    from installer.exceptions import InstallerError
    from installer.sources import WheelFile
    from installer.utils import parse_metadata_file

    try:
        with WheelFile.open(wheel) as source:
            metadata = parse_metadata_file(source.read_dist_info("METADATA"))
            source.validate_record()
    except (InstallerError, ValueError, KeyError, OSError) as exc:
        raise ToolError(
            f"{pkg.describe()}: {wheel.name} is not a valid wheel: {exc}",
            "the file does not hold what its RECORD lists; re-lock from an index you trust",
        ) from None
    _check_name_version(pkg, wheel.name, metadata.get("Name"), metadata.get("Version"))


def _check_name_version(
    pkg: LockedPackage, filename: str, name: str | None, version: str | None
) -> None:
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    try:
        same_version = version is not None and Version(version) == Version(pkg.version)
    except InvalidVersion:
        same_version = False
    if name is None or canonicalize_name(name) != canonicalize_name(pkg.name) or not same_version:
        raise ToolError(
            f"{filename}: its METADATA says {name} {version}, the lock says {pkg.name} "
            f"{pkg.version}",
            "the file is not the package the lock records; the lock is damaged or crafted: "
            "re-lock it",
        )
