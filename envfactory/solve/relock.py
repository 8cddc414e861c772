"""Re-locking: what a new lock keeps of the lock it replaces (locks are sticky: only what the
inputs force moves; docs/lock-create.md).

A lock that lives in a repository is re-locked for small reasons (one package added, a pin
edited); a solve from scratch would move every package that nothing pins. So ``lock`` hands the
solver the previous lock's packages of each platform as preferred (conda: rattler's
``locked_packages``; pip: an existing ``pylock.toml`` output for ``uv pip compile``): only what
the changed inputs require moves. ``lock --update NAME`` leaves NAME out of the preferred
packages, so NAME moves to the newest version the inputs allow and drags along only what the new
version needs (pixi's ``update`` and cargo's ``update -p`` do the same); ``--update-all``
prefers nothing: today's solve from scratch.

``--solver conda-lock`` cannot keep a lock: conda-lock solves every changed input from scratch
(its docs: adding a package "updates existing packages"), and its own ``--update PKG`` re-solves
through conda or mamba in a fake prefix made of the locked packages
(conda_lock/conda_solver.py, ``update_specs_for_arch``), with nothing for the conda side of a
lock that must also change. ``check_solver`` refuses a re-lock with it that would move packages
the user did not ask to move.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from envfactory.catalog.platforms import Platform
from envfactory.errors import UserInputError
from envfactory.lockfile.diff import LockDiff, compare, side_from_packages
from envfactory.lockfile.models import LockedPackage


class Previous(NamedTuple):
    """The lock a re-lock replaces: its packages per platform (empty when there is none)."""

    path: Path
    packages: Mapping[Platform, tuple[LockedPackage, ...]]
    #: why it could not be read, when it exists but is not a lock envfactory can use
    unreadable: str | None = None

    @property
    def names(self) -> set[str]:
        return {p.name for pkgs in self.packages.values() for p in pkgs}


def previous_lock(lock_file: Path) -> Previous:
    """The packages of ``lock_file``, if it is there. One that cannot be read (an envfactory
    0.1 lock, a hand-edited file) is reported and replaced by a solve from scratch: the new
    lock does not depend on it."""
    if not lock_file.is_file():
        return Previous(lock_file, {})
    from envfactory.lockfile.read import read_lock

    try:
        contents = read_lock(lock_file)
    except UserInputError as exc:
        return Previous(lock_file, {}, unreadable=exc.message)
    by_platform: dict[Platform, list[LockedPackage]] = {p: [] for p in contents.platforms}
    for pkg in contents.packages:
        by_platform.setdefault(pkg.platform, []).append(pkg)
    return Previous(lock_file, {p: tuple(v) for p, v in by_platform.items()})


def preferred(
    previous: Previous, update: Collection[str] | None
) -> dict[Platform, tuple[LockedPackage, ...]]:
    """Per platform, the previous packages the solvers should keep: all of them but the names
    in ``update``; none when ``update`` is ``None`` (``--update-all``)."""
    if update is None:
        return {}
    moving = {_normal(n) for n in update}
    return {
        platform: tuple(p for p in pkgs if _normal(p.name) not in moving)
        for platform, pkgs in previous.packages.items()
    }


def check_update_names(previous: Sequence[Previous], update: Sequence[str], label: str) -> None:
    """``--update NAME`` for a NAME none of the locks holds is a typo, or a package they never
    had: an error naming the locks, with the closest names they do hold."""
    if not update:
        return
    existing = [p for p in previous if p.packages]
    if not existing:
        where = ", ".join(str(p.path) for p in previous)
        raise UserInputError(
            f"--update {' '.join(update)}: there is no lock to update yet ({where})",
            f"lock it first: envfactory lock {label}".rstrip(),
        )
    held = {_normal(n) for p in existing for n in p.names}
    unknown = [n for n in update if _normal(n) not in held]
    if unknown:
        import difflib

        close = sorted({c for n in unknown for c in difflib.get_close_matches(n, held, n=3)})
        hint = f"did you mean {', '.join(close)}?" if close else "name a package the lock holds"
        where = ", ".join(str(p.path) for p in existing)
        raise UserInputError(
            f"--update {', '.join(unknown)}: not in {where}",
            f"{hint} (see 'envfactory diff' or the lock's explicit files)",
        )


def check_solver(
    solver: str, previous: Sequence[Previous], update: Sequence[str], update_all: bool
) -> None:
    """``--solver conda-lock`` re-solves from scratch: refused where the lock would be kept
    (an existing lock, no ``--update-all``) or one package moved (``--update PKG``), with the
    two ways that work named."""
    if solver != "conda-lock" or update_all:
        return
    existing = [p for p in previous if p.packages]
    if not update and not existing:
        return  # a first lock: nothing to keep
    asked = f"--update {' '.join(update)}" if update else f"a re-lock of {existing[0].path}"
    raise UserInputError(
        f"{asked} with --solver conda-lock: conda-lock cannot keep the locked packages; it "
        "solves from scratch, so every package nothing pins would move (its own --update "
        "re-solves through conda or mamba, and not for changed inputs)",
        "use the default solver (drop --solver conda-lock): it keeps the lock and moves only "
        "what the inputs or --update PKG need; or pass --update-all to re-solve everything "
        "with conda-lock",
    )


def change_of(
    previous: Previous,
    label: str,
    packages: Mapping[Platform, Sequence[LockedPackage]],
    records: Mapping[Platform, Mapping[str, Any]],
) -> LockDiff:
    """What a re-lock changes: the lock it replaces against the packages it solved (``lock``,
    ``lock --dry-run`` and ``lock --check`` print this)."""
    return compare(
        side_from_packages(str(previous.path), previous.packages),
        side_from_packages(label, packages, records),
    )


def _normal(name: str) -> str:
    """conda names are lower case; pip names compare as PEP 503 normalises them."""
    return name.lower().replace("_", "-").replace(".", "-")
