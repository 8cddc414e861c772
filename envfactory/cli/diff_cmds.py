"""The diff command: what changed between two locks, per platform, for review."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer

from envfactory.cli.output import choose, print_json, stdout_console
from envfactory.errors import EXIT_OK, UserInputError

if TYPE_CHECKING:
    from envfactory.lockfile.diff import LockSide

Format = Literal["text", "json", "markdown"]
FORMATS: tuple[Format, ...] = ("text", "json", "markdown")


def _locks(lock: list[str], project_file: Path | None, locks_dir: Path | None) -> list[Path]:
    """The locks to compare: those named with --lock, else every environment's of the project."""
    from envfactory.project.targets import find_project, lock_target

    if lock:
        return [
            _shown(lock_target(name, project_file=project_file, locks_dir=locks_dir).lock)
            for name in lock
        ]
    project = find_project(project_file)
    if project is None:
        raise UserInputError(
            f"no envfactory.yaml in {Path.cwd()}, and no lock named",
            "run in a project directory, or name the lock: --lock ENV|COMBO|conda-lock.yml, "
            "or give two lock files: envfactory diff OLD.yml NEW.yml",
        )
    from envfactory.lockfile.models import LOCK_FILE

    return [_shown(project.lock_dir(env.name) / LOCK_FILE) for env in project]


def _shown(path: Path) -> Path:
    """A lock under the working directory by its relative path: the labels of the diff (and a
    pull-request comment made of them) then read the same on every machine."""
    try:
        return path.absolute().relative_to(Path.cwd())
    except ValueError:
        return path


def _side(spec: str | None, lock: Path) -> LockSide:
    """``spec``: None (the working tree's lock), a lock file, or a git revision of ``lock``."""
    from envfactory.lockfile import git_adapter
    from envfactory.lockfile.diff import side_from_file, side_from_revision

    if spec is None:
        return side_from_file(lock)
    if Path(spec).is_file():
        return side_from_file(Path(spec))
    if git_adapter.is_revision(lock, spec):
        return side_from_revision(lock, spec)
    raise UserInputError(
        f"'{spec}' is neither a lock file nor a git revision of the repository holding {lock}",
        "give a conda-lock.yml path, or a revision such as HEAD, HEAD~1 or origin/main",
    )


def diff(
    old: str | None = typer.Argument(
        None,
        help="A conda-lock.yml, or a git revision (HEAD, origin/main) of the lock. Default: HEAD.",
        show_default=False,
    ),
    new: str | None = typer.Argument(
        None,
        help="A conda-lock.yml or a git revision. Default: the lock as it is in the working tree.",
        show_default=False,
    ),
    lock: list[str] = typer.Option(
        [],
        "--lock",
        "-l",
        metavar="ENV|COMBO|FILE",
        help="The lock whose revisions are compared: a project environment, a combo "
        "(locks/COMBO/) or a conda-lock.yml. Repeatable. Default: every environment of "
        "./envfactory.yaml.",
    ),
    output_format: str = typer.Option(
        "text", "--format", metavar="[text|json|markdown]", help="text, json or markdown."
    ),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
    project_file: Path | None = typer.Option(
        None, "--project", help="The project file (default: ./envfactory.yaml)."
    ),
    locks_dir: Path | None = typer.Option(
        None, "--locks", help="Where COMBO/conda-lock.yml is looked up (default: ./locks)."
    ),
) -> int:
    """Show what changed between two locks, per platform: packages added, removed and changed
    (version, build, channel, manager, file), the packages the inputs pin marked.

    \b
    envfactory diff                      the project's locks against their last commit
    envfactory diff origin/main          ... against another revision
    envfactory diff HEAD~1 HEAD          between two revisions
    envfactory diff old.yml new.yml      between two lock files
    envfactory diff --format markdown    a table for a pull-request comment
    """
    from envfactory.lockfile.diff import compare, side_from_file, to_json, to_markdown, to_text

    chosen = "json" if as_json else choose(output_format, FORMATS, "--format")
    files = [Path(s) for s in (old, new) if s is not None and Path(s).is_file()]
    if old is not None and new is not None and len(files) == 2:
        diffs = [compare(side_from_file(files[0]), side_from_file(files[1]))]
    else:
        if old is not None and Path(old).is_file() and not lock and new is None:
            raise UserInputError(
                f"which lock should {old} be compared with?",
                "give it: envfactory diff OLD.yml NEW.yml, or --lock ENV|COMBO|FILE",
            )
        diffs = [
            compare(_side(old or "HEAD", path), _side(new, path))
            for path in _locks(lock, project_file, locks_dir)
        ]
    if chosen == "json":
        views = [to_json(d) for d in diffs]
        print_json(views[0] if len(views) == 1 else {"locks": views})
        return EXIT_OK
    console = stdout_console()
    for index, d in enumerate(diffs):
        if index:
            console.print()
        for line in to_markdown(d) if chosen == "markdown" else to_text(d):
            console.print(line)
    return EXIT_OK


def register(app: typer.Typer) -> None:
    """Add diff to the app."""
    app.command("diff")(diff)
