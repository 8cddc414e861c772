"""Printing helpers shared by the command modules: error lines, JSON, tables."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rich.console import Console

from envfactory.errors import UserInputError

Choice = TypeVar("Choice", bound=str)


def choose(value: str, options: tuple[Choice, ...], option: str) -> Choice:
    """An option's value as one of a closed set (a Literal type), or a UserInputError naming
    the set: typed without a cast, and exit 1 like every other bad input."""
    for candidate in options:
        if value == candidate:
            return candidate
    raise UserInputError(f"unknown {option} '{value}'", f"use one of: {', '.join(options)}")


def stdout_console() -> Console:
    from rich.console import Console  # not for --json output, whose commands never need rich

    # Created per call so tests that capture sys.stdout see the output.
    # Tables stay one line per row when piped (rich would wrap them at 80 columns).
    width = None if sys.stdout.isatty() else 200
    # markup=False: catalog text holds [brackets] that rich would eat as markup.
    return Console(file=sys.stdout, highlight=False, soft_wrap=True, width=width, markup=False)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, soft_wrap=True, markup=False)


def print_error(message: str, hint: str | None) -> None:
    sys.stderr.write(f"error: {message}\n")
    if hint:
        sys.stderr.write(f"hint: {hint}\n")
    sys.stderr.flush()


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """A progress or status line on stderr, so stdout stays clean for data."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
