"""conda's command-line conventions, declared once for every command that does what conda does.

conda's own spellings (https://docs.conda.io/projects/conda/en/latest/commands/env/create.html,
https://docs.conda.io/projects/conda/en/26.5.x/commands/create.html):
``-n/--name`` an environment by name, ``-p/--prefix`` by path, ``--subdir/--platform`` the
platform, ``-f/--file`` a file to read, ``-d/--dry-run``, ``-q/--quiet``, ``-v/--verbose``,
``-y/--yes``. Where envfactory once spelled one differently (``-p`` for the platform of lock,
render and mirror), the old spelling still works and says so once on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from envfactory.cli import output
from envfactory.errors import UserInputError

PLATFORM_NAMES = ("--platform", "--subdir")


def platform_option(help_text: str) -> list[str]:
    return typer.Option([], *PLATFORM_NAMES, help=help_text)  # type: ignore[no-any-return]


def old_platform_option() -> list[str]:
    """``-p PLATFORM``, the spelling lock, render and mirror had before conda's."""
    return typer.Option([], "-p", hidden=True)  # type: ignore[no-any-return]


def platforms(chosen: list[str], old: list[str]) -> list[str]:
    """``--platform`` values, with ``-p`` ones after a deprecation note."""
    if old:
        output.warn(
            "note: -p as the platform is deprecated and will go away: write --platform "
            f"{old[0]} (or --subdir); as in conda, -p is the prefix"
        )
    return [*chosen, *old]


def quiet_option() -> bool:
    return typer.Option(  # type: ignore[no-any-return]
        False, "-q", "--quiet", help="Print no progress, only the result and errors."
    )


def verbose_option() -> int:
    return typer.Option(  # type: ignore[no-any-return]
        0,
        "-v",
        "--verbose",
        count=True,
        show_default=False,
        help="Print more progress: one line per file, and the bytes downloaded.",
    )


def set_verbosity(quiet: bool, verbose: int) -> None:
    if quiet and verbose:
        raise UserInputError("give -q or -v, not both")
    output.set_level(output.QUIET if quiet else output.VERBOSE if verbose else output.NORMAL)


def yes_option(help_text: str = "Do not ask for confirmation.") -> bool:
    return typer.Option(False, "-y", "--yes", help=help_text)  # type: ignore[no-any-return]


def dry_run_option(help_text: str) -> bool:
    return typer.Option(False, "--dry-run", "-d", help=help_text)  # type: ignore[no-any-return]


def prefix_option(help_text: str) -> Path | None:
    return typer.Option(None, "--prefix", "-p", help=help_text)  # type: ignore[no-any-return]


def name_option(help_text: str) -> str | None:
    return typer.Option(None, "--name", "-n", help=help_text)  # type: ignore[no-any-return]


def existing_environment(
    prefix: Path | None, name: str | None, positional: Path | None = None
) -> Path | None:
    """The environment ``-p PREFIX``, ``-n NAME`` (in the envs dirs) or a PREFIX argument
    names; None when none is given. More than one is an error."""
    given = [x for x in (prefix, name, positional) if x is not None]
    if len(given) > 1:
        raise UserInputError(
            "give one environment: -p PREFIX, -n NAME or a PREFIX argument", "e.g. -n tf114"
        )
    if name is not None:
        from envfactory.project.envdirs import existing_prefix

        return existing_prefix(name)
    return prefix if prefix is not None else positional


def confirm(question: str, yes: bool) -> None:
    """Ask ``question`` as conda does (``Proceed ([y]/n)?``) unless ``-y``; not on a terminal
    and no ``-y``: an error, nothing done (a script must say -y)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise UserInputError(f"{question}: not confirmed (no terminal to ask on)", "pass -y")
    sys.stderr.write(f"{question}\nProceed ([y]/n)? ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("", "y", "yes"):
        raise UserInputError("not confirmed; nothing was changed", "answer y, or pass -y")
