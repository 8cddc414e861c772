"""Printing helpers shared by the command modules: error lines, JSON, tables."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rich.console import Console

from envfactory.errors import UserInputError
from envfactory.progress import stop_point
from envfactory.untrusted import safe_text

Choice = TypeVar("Choice", bound=str)

# How much progress the commands print on stderr (-q, default, -v); errors always show.
QUIET, NORMAL, VERBOSE = 0, 1, 2
_level = NORMAL


def set_level(level: int) -> None:
    global _level
    _level = level


def level() -> int:
    return _level


def choose(value: str, options: tuple[Choice, ...], option: str) -> Choice:
    """An option's value as one of a closed set (a Literal type), or a UserInputError naming
    the set: typed without a cast, and exit 1 like every other bad input."""
    for candidate in options:
        if value == candidate:
            return candidate
    raise UserInputError(f"unknown {option} '{value}'", f"use one of: {', '.join(options)}")


class Lines:
    """Plain text lines on a stream: the data the commands print (tables, reports) is plain
    text, exactly as written, never wrapped. rich printed it the same way once markup (catalog
    text holds ``[brackets]``), highlighting, emoji codes and wrapping were turned off, and cost
    30-50 ms of import and 20-60 ms of rendering per command (docs/benchmarks.md); it stays
    for what it does well, the progress bar on a terminal (``stderr_console``)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def print(self, text: str = "") -> None:
        self.stream.write(safe_text(text) + "\n")


def write_lines(lines: Sequence[str]) -> None:
    """Plain lines on stdout, each made safe to print (``untrusted.safe_text``)."""
    sys.stdout.write("".join(f"{safe_text(line)}\n" for line in lines))
    sys.stdout.flush()


def stdout_console() -> Lines:
    # Created per call so tests that capture sys.stdout see the output.
    return Lines(sys.stdout)


def columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart, a header line first, no trailing spaces."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def stderr_console() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, soft_wrap=True, markup=False)


def tolerant_streams() -> None:
    """Let stdout and stderr print any text in the console's code page.

    A Windows console or pipe encodes in the ANSI/OEM code page (cp1252 on a Western system);
    a path such as ``C:\\Users\\张三`` cannot be encoded there, and the print after the files
    were written raised UnicodeEncodeError (exit 1 for a render that had succeeded). Characters
    the code page lacks are written as ``\\uXXXX`` escapes, as Python does for stderr.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if reconfigure is not None and encoding not in ("utf8", "utf16", "utf32"):
            reconfigure(errors="backslashreplace")


def print_error(message: str, hint: str | None) -> None:
    """``error:`` and ``hint:`` lines; a message quotes input (a lock's strings, a URL), so it
    is printed without credentials or escape sequences (``untrusted.safe_text``)."""
    sys.stderr.write(f"error: {safe_text(message)}\n")
    if hint:
        sys.stderr.write(f"hint: {safe_text(hint)}\n")
    sys.stderr.flush()


def warn(message: str) -> None:
    """A line on stderr that -q does not silence: a deprecation, a caveat about the result."""
    sys.stderr.write(safe_text(message) + "\n")
    sys.stderr.flush()


def detail(message: str) -> None:
    """A line only -v prints (one per package)."""
    if _level >= VERBOSE:
        note(message)


def print_json_error(message: str, hint: str | None, exit_code: int, kind: str) -> None:
    """An error under ``--json``: one JSON object on stdout, where a script reads the result
    (conda does the same), with the exit code the process ends with."""
    print_json(
        {
            "error": safe_text(message),
            "hint": None if hint is None else safe_text(hint),
            "exit_code": exit_code,
            "exception_name": kind,
        }
    )


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """A progress or status line on stderr, so stdout stays clean for data; none under -q."""
    if _level == QUIET:
        return
    sys.stderr.write(safe_text(message) + "\n")
    sys.stderr.flush()
    stop_point(message)
