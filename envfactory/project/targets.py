"""What a command acts on, decided once: a project environment, a combo, a lockfile or a prefix.

``create``, ``mirror``, ``kernel`` and ``lock --check`` take a NAME that may be several things.
The rule, the same for every command:

1. an environment of the project (``envfactory.yaml`` found from the working directory, or
   ``--project``) wins: its lock is ``locks/ENV/conda-lock.yml`` next to the manifest and its
   default prefix ``envs/ENV``;
2. else an existing path: a ``conda-lock.yml`` file, or a directory holding one;
3. else a combo name: ``locks/COMBO/conda-lock.yml`` under ``--locks-dir`` (default ``./locks``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from envfactory.errors import UserInputError, nearest
from envfactory.lockfile.models import LOCK_FILE

if TYPE_CHECKING:
    from envfactory.project.manifest import Project

PROJECT_FILE = "envfactory.yaml"  # manifest.PROJECT_FILE (tests/test_cli_imports.py)
TargetKind = Literal["project environment", "combo", "lockfile"]


def find_project(explicit: Path | None) -> Project | None:
    """``manifest.find_project``, whose reader (catalog, lock, render: ~0.1 s of imports) is
    imported only when there is a project file to read."""
    if explicit is None and not (Path.cwd() / PROJECT_FILE).is_file():
        return None
    from envfactory.project.manifest import find_project as find

    return find(explicit)


class LockTarget(NamedTuple):
    """A lock to act on, and where it came from."""

    name: str
    kind: TargetKind
    lock: Path
    #: where ``create`` puts the environment without -p/-n (project environments only)
    default_prefix: Path | None = None
    project: Project | None = None

    def describe(self) -> str:
        if self.kind == "project environment" and self.project is not None:
            env = self.project.environment(self.name)
            return (
                f"{self.name}: project environment of {self.project.path} (combo {env.combo.name})"
            )
        return f"{self.name}: {self.kind} ({self.lock})"


def lock_target(
    target: str, *, project_file: Path | None = None, locks_dir: Path | None = None
) -> LockTarget:
    """Resolve NAME to its lock by the rule above; a lock that does not exist yet is an error
    whose hint says how to make it."""
    project = find_project(project_file)
    if project is not None and target in project.environments:
        lock = (locks_dir or project.locks_dir) / target / LOCK_FILE
        if not lock.is_file():
            raise UserInputError(
                f"project environment '{target}' has no lock yet ({lock} does not exist)",
                f"run 'envfactory lock {target}' in {project.directory}",
            )
        return LockTarget(
            target, "project environment", lock, project.default_prefix(target), project
        )
    path = Path(target)
    if path.is_file():
        return LockTarget(target, "lockfile", path)
    if path.is_dir() and (path / LOCK_FILE).is_file():
        return LockTarget(target, "lockfile", path / LOCK_FILE)
    candidate = (locks_dir or Path("locks")) / target / LOCK_FILE
    if candidate.is_file():
        return LockTarget(target, "combo", candidate)
    where = f"no environment '{target}' in {project.path}, " if project is not None else ""
    message = f"no lockfile found for '{target}' ({where}no file {path}, no {candidate})"
    raise UserInputError(message, _missing_lock_hint(target, project))


def _missing_lock_hint(target: str, project: Project | None) -> str:
    """How to get the lock NAME needs: 'envfactory lock NAME' only where NAME is a combo
    (a project environment's lock is handled above); else the names it may have meant."""
    from envfactory.catalog.loader import load_catalog
    from envfactory.catalog.model import suggest_combos

    catalog = load_catalog()
    if target in catalog.combos:
        return f"run 'envfactory lock {target}' first, or pass the path of a {LOCK_FILE}"
    envs = sorted(project.environments) if project is not None else []
    close = nearest(target, envs, 2) + suggest_combos(catalog, target)
    known = "a project environment, a combo (see 'envfactory list') or a path to a " + LOCK_FILE
    if close:
        return f"'{target}' is not {known}; did you mean {', '.join(close)}?"
    return f"'{target}' is not {known}"


def named_prefix(name: str) -> Path:
    """``-n NAME`` of a new environment: NAME in the first usable envs dir, found as conda
    and micromamba find it (``envfactory.project.envdirs``). NAME is a plain name, never a
    path."""
    from envfactory.project.envdirs import new_prefix

    return new_prefix(name)


def prefix_target(target: str, *, project_file: Path | None = None) -> Path:
    """Resolve NAME to an environment's directory: a project environment's default prefix, else
    an existing directory."""
    project = find_project(project_file)
    if project is not None and target in project.environments:
        return project.default_prefix(target)
    if Path(target).is_dir():
        return Path(target)
    raise UserInputError(
        f"'{target}' is neither an environment of a project here nor a directory",
        "pass -p PREFIX, or run in the directory of envfactory.yaml",
    )
