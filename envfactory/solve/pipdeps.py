"""Which pip package requires which: the edges a lock records for its pip packages.

uv's ``pylock.toml`` output (what ``pypi.lock_target`` reads) names files and hashes but no
dependencies, so a lock's pip entries had ``dependencies: {}`` and nothing tied a pip package to
the requirement that brought it. A package appended to the list by hand (an sdist whose build
backend runs at create) looked like every other one. uv's requirements output says it:
``absl-py==2.1.0  # via tensorboard, tensorflow-gpu`` (``--annotation-style line``). It is asked
once more, with every locked version pinned, so the edges are those of the locked set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from envfactory.errors import ToolError
from envfactory.lockfile.models import LockedPackage
from envfactory.solve.pypi import PipTarget, run_uv

# "name==version  # via a, b" or "name @ url  # via a" (uv pip compile --annotation-style line)
_LINE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?:==|@)[^#]*#\s*via\s+(.*)")


def canonical(name: str) -> str:
    """PEP 503's normalized name (``packaging.utils.canonicalize_name``'s rule), which also
    matches a conda name to its PyPI project (``typing_extensions``, ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def required_by(text: str) -> dict[str, set[str]]:
    """From uv's annotated requirements: each package -> the packages that require it (the
    ``-r requirements.in``/``-c constraints.txt`` entries, which are not packages, left out)."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        found = _LINE.fullmatch(line.strip())
        if found is None:
            continue
        dependants = {
            canonical(item.strip())
            for item in found.group(2).split(",")
            if item.strip() and not item.strip().startswith("-")
        }
        out.setdefault(canonical(found.group(1)), set()).update(dependants)
    return out


def with_dependencies(target: PipTarget, packages: Sequence[LockedPackage]) -> list[LockedPackage]:
    """``packages`` (uv's resolution of ``target``) with ``depends`` set to the names each one
    requires, conda-provided ones included (``numpy``): the resolution is asked once more in
    uv's annotated text form, every locked version pinned."""
    if not packages:
        return list(packages)
    pins = [f"{p.name}=={p.version}" for p in packages]
    proc, text = run_uv(
        target,
        f"listing the dependencies of {target.describe()}",
        pins=pins,
        preferences=False,
        command_for=_annotated,
    )
    if proc.returncode != 0:
        tail = "\n".join(f"  {line}" for line in proc.stderr.strip().splitlines()[-16:])
        raise ToolError(
            f"uv could not list the dependencies of the locked pip packages of "
            f"{target.describe()}:\n{tail}",
            "the locked versions did not resolve again; re-run the lock",
        )
    return attach(packages, required_by(text))


def attach(
    packages: Sequence[LockedPackage], dependants: Mapping[str, set[str]]
) -> list[LockedPackage]:
    """Each package with the sorted names of what it requires (the reverse of ``dependants``)."""
    requires: dict[str, set[str]] = {}
    for name, whose in dependants.items():
        for dependant in whose:
            requires.setdefault(dependant, set()).add(name)
    return [
        p._replace(depends=tuple(sorted(requires.get(canonical(p.name), ())))) for p in packages
    ]


def _annotated(command: list[str]) -> list[str]:
    """``uv pip compile`` as ``PipTarget.uv_command`` writes it, in the requirements format
    with one ``# via`` comment per line instead of ``pylock.toml``."""
    out = []
    skip = False
    for arg in command:
        if skip:
            skip = False
            continue
        if arg == "--format":
            skip = True
            continue
        out.append(arg)
    return [*out, "--annotation-style", "line"]
