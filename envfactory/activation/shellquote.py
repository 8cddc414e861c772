"""Quoting for the activation stubs and the test harness: each function returns a literal that
its shell reads back as exactly ``text``. The rules are the core's (activation/core.py), the
same ones its emitters use, so a template and the core never disagree. Templates never
hand-quote; they use these as filters.
"""

from __future__ import annotations

from envfactory.activation import core
from envfactory.errors import EnvfactoryError


class UnquotableError(EnvfactoryError):
    """A value cannot be written as a literal for one shell (e.g. a newline for csh)."""


def sh(text: str) -> str:
    """POSIX sh (bash, zsh, dash): single quotes; a quote is written as ``'\\''``."""
    return core.sh_quote(text)


def fish(text: str) -> str:
    """fish: single quotes, in which only backslash and the quote need a backslash."""
    return core.fish_quote(text)


def csh(text: str) -> str:
    """csh/tcsh: single quotes, ``\\!`` for history's ``!``; a line break cannot be written."""
    try:
        return core.csh_quote(text)
    except core.Refused as err:
        raise UnquotableError(f"{err}: {text!r}") from None


def powershell(text: str) -> str:
    """PowerShell: an ASCII expression (quoted runs and ``[char]`` code units)."""
    return core.powershell_expr(text)


def xonsh(text: object) -> str:
    """xonsh (Python syntax): a Python literal (str, or plain data)."""
    return repr(text)


FILTERS = {"sh": sh, "fish": fish, "csh": csh, "powershell": powershell, "xonsh": xonsh}
