"""Install one wheel into an environment the way pip would install it with that environment's
own interpreter, without running that interpreter: the adapter for the ``installer`` library
(PyPI ``installer``, the reference implementation of the wheel binary format's install steps,
https://installer.pypa.io; pip and uv implement the same steps).

``installer`` is used rather than ``pip --target`` (which puts console scripts under
``site-packages/bin`` with envfactory's own interpreter in their shebang) and rather than pip
with the environment's interpreter (which would run a program from the new prefix at
``create``: issue 28). It takes the scheme as a plain mapping, so a win-64 prefix is laid out
on Linux too, and it carries the Windows ``.exe`` launchers.

The scheme is sysconfig's ``posix_prefix`` (linux-64) or ``nt`` (win-64) for the prefix, what
the environment's Python reports as ``sysconfig.get_paths()``: ``lib/pythonX.Y/site-packages``,
``bin``, ``include/pythonX.Y/<name>`` and the prefix itself for ``.data/data``; on Windows
``Lib\\site-packages``, ``Scripts``, ``Include\\<name>``. Scripts get a shebang (Windows: a
launcher) naming the environment's ``python`` at its final prefix, as pip writes
``sys.executable``. ``RECORD`` lists every file with its sha256, relative to site-packages;
``INSTALLER`` says ``envfactory``; ``REQUESTED`` marks what the lock's requirements named
(PEP 376); ``direct_url.json`` (PEP 610) is written for a requirement that named a URL.

Before anything is written the wheel's own ``METADATA`` (Name, Version) must be the lock's
record and every member must match the wheel's ``RECORD`` (installer's ``validate_record``); a
file that already exists in the prefix (a conda package's: its inode is the package cache's) is
never written through.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PureWindowsPath
from typing import Any, BinaryIO, NamedTuple

from envfactory.build.checks import LockedPackage
from envfactory.catalog.platforms import Platform, os_of
from envfactory.errors import ToolError

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


def _destination(scheme_dict: dict[str, str], where: InstallScheme, written: set[str]) -> Any:
    """installer's destination, which replaces a file only when an earlier wheel of the same
    create wrote it (pip replaces it too: tensorflow-gpu 1.14.0 and tensorboard 1.14.0 both
    declare the ``tensorboard`` console script); any other existing file is left alone and
    the install refused (it is a conda package's, its inode the package cache's)."""
    from installer.destinations import SchemeDictionaryDestination

    class Destination(SchemeDictionaryDestination):
        def write_to_fs(self, scheme: Any, path: str, stream: BinaryIO, is_executable: bool) -> Any:
            target = os.path.abspath(os.path.join(self.scheme_dict[scheme], path))  # noqa: PTH100, PTH118
            if os.path.lexists(target):
                if target not in written:
                    raise FileExistsError(f"File already exists: {target}")
                os.unlink(target)  # noqa: PTH108 - a new inode, never written through
            entry = super().write_to_fs(scheme, path, stream, is_executable)
            written.add(target)
            return entry

    return Destination(
        scheme_dict,
        interpreter=where.interpreter,
        script_kind=where.script_kind,  # type: ignore[arg-type]
    )


def install_wheel(
    wheel: Path,
    pkg: LockedPackage,
    where: InstallScheme,
    *,
    requested: bool,
    direct_url: str | None = None,
    written: set[str] | None = None,
) -> list[str]:
    """Install ``wheel`` (checked by ``check_metadata`` first) into ``where``; returns the
    paths its ``RECORD`` lists, relative to site-packages. ``written`` collects the paths the
    wheels of one create wrote (a later one may replace those, as pip does)."""
    from installer import install
    from installer.sources import WheelFile
    from installer.utils import canonicalize_name as _canonical

    check_metadata(wheel, pkg)
    extra = {"INSTALLER": INSTALLER_NAME}
    if requested:
        extra["REQUESTED"] = b""
    if direct_url is not None:
        doc = {"url": direct_url, "archive_info": {"hashes": {"sha256": pkg.sha256}}}
        extra["direct_url.json"] = (json.dumps(doc, sort_keys=True) + "\n").encode()
    with WheelFile.open(wheel) as source:
        headers = where.headers / _canonical(source.distribution)
        destination = _destination(
            {
                "purelib": str(where.purelib),
                "platlib": str(where.purelib),
                "headers": str(headers),
                "scripts": str(where.scripts),
                "data": str(where.data),
            },
            where,
            set() if written is None else written,
        )
        try:
            install(source, destination, extra)
        except FileExistsError as exc:
            raise ToolError(
                f"{pkg.describe()}: {wheel.name} would overwrite {exc.args[0].split(': ', 1)[-1]}, "
                "which another package of the environment installed",
                "two packages of the lock install the same file; re-lock (a package both conda "
                "and pip provide is taken from conda)",
            ) from None
        except ValueError as exc:  # a member outside its scheme, a bad .data directory
            raise ToolError(
                f"{pkg.describe()}: {wheel.name} cannot be installed: {exc}",
                "the wheel is damaged or crafted; re-lock from an index you trust",
            ) from None
        record = where.purelib / source.dist_info_dir / "RECORD"
    return [line.split(",", 1)[0] for line in record.read_text("utf-8").splitlines() if line]
