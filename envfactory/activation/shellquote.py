"""Quoting for the activation scripts: one function per shell, each returning a literal that the
shell reads back as exactly ``text``. Templates never hand-quote; they use these as filters.
"""

from __future__ import annotations

import json

from envfactory.errors import EnvfactoryError


class UnquotableError(EnvfactoryError):
    """A value cannot be written as a literal for one shell (e.g. a newline for csh)."""


def sh(text: str) -> str:
    """POSIX sh (bash, zsh, dash): single quotes; a quote is written as ``'\\''``."""
    return "'" + text.replace("'", "'\\''") + "'"


def fish(text: str) -> str:
    """fish: single quotes, in which only backslash and the quote need a backslash."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def csh(text: str) -> str:
    """csh/tcsh: single quotes; ``!`` still triggers history substitution there, so ``\\!``."""
    if "\n" in text:
        raise UnquotableError(f"a csh literal cannot hold a newline: {text!r}")
    return "'" + text.replace("'", "'\\''").replace("!", "\\!") + "'"


def powershell(text: str) -> str:
    """PowerShell: single-quoted string; a quote (any of the typographic ones) is doubled."""
    out = []
    for char in text:
        out.append(char * 2 if char in "'\u2018\u2019\u201a\u201b" else char)
    return "'" + "".join(out) + "'"


def xonsh(text: object) -> str:
    """xonsh (Python syntax): a Python literal (str, or plain data such as the plan)."""
    return repr(text)


def jscript(value: object) -> str:
    """JScript (ES3, Windows Script Host): a JSON literal of plain data, ASCII only (``\\uXXXX``
    escapes), so the file reads the same whatever code page WSH assumes."""
    return json.dumps(value, ensure_ascii=True)


def awk(text: str) -> str:
    """awk: a double-quoted string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


FILTERS = {
    "sh": sh,
    "fish": fish,
    "csh": csh,
    "powershell": powershell,
    "xonsh": xonsh,
    "awk": awk,
    "jscript": jscript,
}
