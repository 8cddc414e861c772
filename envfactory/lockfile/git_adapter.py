"""The one place that runs git: a file as committed at a revision (``envfactory diff HEAD``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from envfactory.errors import ToolError, UserInputError

GIT_TIMEOUT_S = 60


def _git(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    git = shutil.which("git")
    if git is None:
        raise ToolError("git is not installed, so a revision cannot be read", "install git")
    try:
        return subprocess.run(
            [git, "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ToolError(f"git {args[0]} ran longer than {GIT_TIMEOUT_S} s") from None


def _existing_directory(path: Path) -> Path:
    """The nearest existing directory at or above ``path``'s directory (a lock that no longer
    exists in the working tree may still be read from a revision)."""
    directory = path.parent.resolve()
    while not directory.is_dir() and directory != directory.parent:
        directory = directory.parent
    return directory


def is_revision(path: Path, revision: str) -> bool:
    """Whether ``revision`` names a commit in the repository that holds ``path``."""
    if revision.startswith("-"):
        return False  # never an option to git
    proc = _git(
        _existing_directory(path), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"
    )
    return proc.returncode == 0


def show_file(path: Path, revision: str) -> str | None:
    """``path`` (absolute or relative to the working directory) as committed at ``revision``;
    ``None`` when it did not exist there. Errors name the revision and the repository."""
    directory = _existing_directory(path)
    top = _git(directory, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise UserInputError(
            f"{directory} is not in a git repository, so '{revision}' cannot be read",
            "give OLD as a lock file instead of a revision",
        )
    if not is_revision(path, revision):
        raise UserInputError(
            f"'{revision}' is not a commit of the repository at {top.stdout.strip()}",
            "give a revision such as HEAD, HEAD~1 or origin/main, or a lock file",
        )
    root = Path(top.stdout.strip()).resolve()
    try:
        relative = path.resolve().relative_to(root)
    except ValueError:
        raise UserInputError(f"{path} is outside the repository at {root}") from None
    proc = _git(root, "show", f"{revision}:{relative.as_posix()}")
    if proc.returncode != 0:
        listed = _git(root, "ls-tree", "--name-only", revision, "--", relative.as_posix())
        if listed.returncode == 0 and not listed.stdout.strip():
            return None
        raise ToolError(f"git show {revision}:{relative.as_posix()} failed: {proc.stderr.strip()}")
    return proc.stdout
