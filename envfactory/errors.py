"""One error hierarchy; the CLI turns each into an ``error:`` + ``hint:`` pair and an exit code.

Exit codes (documented in the README): 0 ok, 1 bad input (also a stale lock under
``lock --check``, as the lock issue asks), 2 solver or outside-tool failure, 3 problems found
(doctor, compat, explain, recommend, verify).
"""

from __future__ import annotations

import difflib
import errno
from collections.abc import Iterable

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_TOOL_FAILURE = 2
EXIT_PROBLEMS_FOUND = 3


class EnvfactoryError(Exception):
    """Base of every error a user can cause or fix. Never shown with a traceback."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UserInputError(EnvfactoryError):
    """A name, option or file the user gave is wrong (exit 1)."""


class CatalogError(EnvfactoryError):
    """The catalog data or a template is malformed; the message names file and line (exit 1)."""


class ToolError(EnvfactoryError):
    """The solver or an outside tool failed (exit 2)."""

    exit_code = EXIT_TOOL_FAILURE


class SystemFailure(ToolError):
    """The machine refused: a read-only or full disk, a permission, a missing device (exit 2)."""


class ProblemsFound(EnvfactoryError):
    """A check ran and found problems (exit 3)."""

    exit_code = EXIT_PROBLEMS_FOUND


def nearest(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The closest valid choices to ``word``, best first, for "did you mean" hints."""
    pool = sorted(set(choices))
    close = difflib.get_close_matches(word, pool, n=n, cutoff=0.5)
    if close:
        return close
    prefix = [c for c in pool if c.startswith(word[:4])]
    return prefix[:n]


def did_you_mean(word: str, choices: Iterable[str], listing: str) -> str:
    """A hint line: ``did you mean X, Y? see '<listing>'`` (or just the listing)."""
    close = nearest(word, choices)
    if close:
        return f"did you mean {', '.join(close)}? see '{listing}'"
    return f"see '{listing}'"


_OS_HINTS = {
    errno.ENOSPC: "free space on that disk (or point TMPDIR and the output at another one), "
    "then run the command again; nothing half-written was kept",
    errno.EDQUOT: "your disk quota is used up; free some space, then run the command again",
    errno.EROFS: "the file system is mounted read-only; write somewhere else (-p/--prefix, "
    "--locks, or run from a writable directory)",
    errno.EACCES: "you may not write there; choose a directory you own, or fix its permissions",
    errno.EPERM: "you may not write there; choose a directory you own, or fix its permissions",
}


def from_os_error(exc: OSError) -> SystemFailure:
    """An ``OSError`` that reached the CLI (disk full, read-only, permission denied) as an
    ``error:`` + ``hint:`` pair with exit 2: the input was fine, the machine said no."""
    from pathlib import Path

    what = exc.strerror or type(exc).__name__
    hint = _OS_HINTS.get(exc.errno or 0, "check the path and the disk, then run the command again")
    if not exc.filename:
        return SystemFailure(f"cannot write: {what}", hint)
    where = str(exc.filename)
    path = Path(where)
    if path.name.startswith(".") and path.name.endswith(".tmp"):  # an atomic write's temporary
        where = str(path.parent)
    if exc.filename2:
        where += f" -> {exc.filename2}"
    return SystemFailure(f"cannot write {where}: {what}", hint)
