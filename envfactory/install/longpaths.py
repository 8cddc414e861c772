"""Windows' 260-character path limit, checked before ``create`` links anything.

Without ``LongPathsEnabled`` a Windows program cannot open a file whose full path is longer
than 259 characters (``MAX_PATH`` with its NUL; envfactory.host). An environment deep in a
user's folder holds such files (TensorFlow's ``include`` tree, test data of wheels): written
by a long-path aware writer, they are there, and then the environment's own Python cannot
import them. So ``create`` measures the longest path it will write -- the staging folder (a
sibling of the prefix with a longer name) plus each file the conda packages' ``info/paths.json``
and the wheels' RECORDs list -- and stops before linking when it is over the limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PureWindowsPath
from typing import Any

from envfactory import host
from envfactory.errors import UserInputError

LIMIT = host.MAX_PATH - 1
"""The longest full path a program that is not long-path aware can open."""

WHEEL_SCHEMES = {"purelib": "Lib\\site-packages", "platlib": "Lib\\site-packages"}
"""Where a wheel's members go in a win-64 prefix (envfactory.cache.wheelinstall.scheme);
``scripts`` go to ``Scripts``, ``data`` to the prefix, ``headers`` to ``Include\\<name>``."""


def conda_paths(package_dirs: Iterable[Path]) -> Iterable[str]:
    """Every path the extracted conda packages' ``info/paths.json`` list (checked when the
    cache took them in), relative to the prefix."""
    for directory in package_dirs:
        data = json.loads((directory / "info" / "paths.json").read_text(encoding="utf-8"))
        for entry in data.get("paths", ()):
            yield str(entry["_path"])


def wheel_paths(manifests: Iterable[Mapping[str, Any]]) -> Iterable[str]:
    """Every file the unpacked wheels put in the prefix (their manifests: scheme, path),
    relative to the prefix; console scripts become ``Scripts\\NAME.exe``."""
    for manifest in manifests:
        for entry in manifest.get("files", ()):
            scheme, rel = str(entry[0]), str(entry[1])
            if scheme in WHEEL_SCHEMES:
                yield f"{WHEEL_SCHEMES[scheme]}\\{rel}"
            elif scheme == "scripts":
                yield f"Scripts\\{rel}"
            elif scheme == "headers":
                yield f"Include\\{manifest.get('name')}\\{rel}"
            else:
                yield rel
        for script in manifest.get("scripts", ()):
            yield f"Scripts\\{script[0]}.exe"


def longest(root: str, relpaths: Iterable[str]) -> tuple[int, str]:
    """The longest full path under ``root`` (a Windows path): its length and the path."""
    best = ""
    for rel in relpaths:
        if len(rel) > len(best):
            best = rel
    full = str(PureWindowsPath(root) / best.replace("/", "\\")) if best else root
    return len(full), full


def check(roots: Sequence[str], relpaths: Iterable[str], enabled: bool | None) -> None:
    """Raise when a file under the longest of ``roots`` would exceed ``LIMIT`` on a Windows
    host without long paths (``enabled`` is ``host.long_paths_enabled()``: None elsewhere)."""
    if enabled is None or enabled:
        return
    root = max(roots, key=len)
    length, path = longest(root, relpaths)
    if length <= LIMIT:
        return
    shortest = min(roots, key=len)
    room = LIMIT - (length - len(root))
    raise UserInputError(
        f"{path} would be {length} characters long, over Windows' limit of {LIMIT} "
        "(LongPathsEnabled is off): the environment's Python could not open it",
        "enable long paths (set HKLM\\SYSTEM\\CurrentControlSet\\Control\\FileSystem "
        "LongPathsEnabled to 1 as an administrator, or the group policy 'Enable Win32 long "
        "paths'; https://learn.microsoft.com/windows/win32/fileio/maximum-file-path-limitation),"
        f" or use a prefix of at most {max(room - (len(root) - len(shortest)), 3)} characters "
        f"(this one, {shortest}, has {len(shortest)})",
    )


def check_create(
    staging: Path,
    prefix: Path,
    package_dirs: Iterable[Path],
    wheel_manifests: Iterable[Mapping[str, Any]],
) -> None:
    """``create``'s check on a Windows host, once the packages are in the cache and before
    anything is linked into ``staging`` (which becomes ``prefix``)."""
    enabled = host.long_paths_enabled()
    if enabled is None or enabled:
        return
    from itertools import chain

    paths = chain(conda_paths(package_dirs), wheel_paths(wheel_manifests))
    check([str(staging), str(prefix)], paths, enabled)
