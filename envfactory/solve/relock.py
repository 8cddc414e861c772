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
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from envfactory.catalog.platforms import Platform
from envfactory.errors import UserInputError
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


def _normal(name: str) -> str:
    """conda names are lower case; pip names compare as PEP 503 normalises them."""
    return name.lower().replace("_", "-").replace(".", "-")
