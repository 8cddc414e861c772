"""Checks for strings that come from untrusted input -- a lock from a pull request, a package's
metadata, a project manifest -- each for the place the string goes: a shell, pip's requirements
file, conda's state file, a file name, a template. Pure functions; the reader that found the
string raises, naming the file (and line) it came from. docs/security.md lists who calls what.

Every pattern is applied with ``fullmatch``: ``^...$`` lets ``"abc\\n"`` through (``$`` matches
before a final newline).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Collection, Mapping
from typing import Any

from envfactory.errors import UserInputError

# Environment variables: what every shell accepts as a name.
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by the activation scripts or by conda itself: a project variable must not fight them.
RESERVED_VARIABLE = re.compile(r"PATH|LD_LIBRARY_PATH|CUDA_PATH.*|TF_CPP_MIN_LOG_LEVEL|CONDA_.*")
RESERVED_HINT = (
    "PATH, LD_LIBRARY_PATH, CUDA_PATH* and TF_CPP_MIN_LOG_LEVEL come from the combo (see "
    "'envfactory show COMBO') and CONDA_* from conda; choose another variable"
)
# Variables that decide which program a command name runs, which libraries the loader maps, or
# which code a shell or an interpreter runs before the user's own (docs/security.md): set on every
# activation, one of these would let whoever wrote the lock run code as every user of the
# environment. Sources: ld.so(8) (LD_*), dyld(1) (DYLD_*), bash(1) (BASH_ENV, ENV, PROMPT_COMMAND,
# PS1-PS4, IFS, SHELLOPTS, BASHOPTS, CDPATH, GLOBIGNORE), zsh(1) (ZDOTDIR), python(1)
# (PYTHON*), perlrun(1) (PERL5LIB, PERL5OPT, PERLLIB), ruby(1) (RUBYOPT, RUBYLIB), node(1)
# (NODE_OPTIONS, NODE_PATH), the JVM (JAVA_TOOL_OPTIONS, _JAVA_OPTIONS, JDK_JAVA_OPTIONS),
# glibc's iconv (GCONV_PATH) and resolver (HOSTALIASES, LOCALDOMAIN, RES_OPTIONS), conda and
# mamba (CONDA_*, MAMBA_*), and what runs a program by name (SHELL, EDITOR, VISUAL, PAGER, BROWSER,
# TMPDIR, HOME, XDG_*).
REDIRECTING_VARIABLE = re.compile(
    r"PATH|LD_.*|DYLD_.*|CONDA_.*|_CONDA_.*|MAMBA_.*|PYTHON.*|BASH_ENV|ENV|ZDOTDIR|"
    r"PROMPT_COMMAND|PS[0-4]|IFS|SHELLOPTS|BASHOPTS|CDPATH|GLOBIGNORE|PERL5LIB|PERL5OPT|"
    r"PERLLIB|RUBYOPT|RUBYLIB|NODE_OPTIONS|NODE_PATH|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|"
    r"JDK_JAVA_OPTIONS|GCONV_PATH|HOSTALIASES|LOCALDOMAIN|RES_OPTIONS|SHELL|EDITOR|VISUAL|"
    r"PAGER|BROWSER|TMPDIR|HOME|XDG_.*",
    re.IGNORECASE,  # Windows reads environment names case-insensitively (Path, ComSpec)
)
REDIRECTING_HINT = (
    "a project variable is set on every activation; one that chooses which program, library or "
    "start-up code runs (PATH, LD_*, DYLD_*, PYTHON*, BASH_ENV, ...) is refused, see "
    "docs/security.md; set it in your own shell instead"
)
# Names that become a directory or file name (environments, combos, kernels): no separator,
# no leading dot or dash, nothing a shell or a URL treats specially.
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# conda package names (rattler: "0-9, a-z, A-Z, -, _, or .") and build strings (CEP 26:
# "ASCII letters, ASCII digits and the characters '_', '.', '+'").
CONDA_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
CONDA_BUILD = re.compile(r"[A-Za-z0-9_.+]+")
# conda versions: letters, digits, '.', '_', '+' and the epoch's '!'; never '-' (the file name
# is NAME-VERSION-BUILD).
CONDA_VERSION = re.compile(r"[A-Za-z0-9_.+!]+")
# PyPI project names (PEP 508) and versions as pip writes them.
PIP_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
PIP_VERSION = re.compile(r"[A-Za-z0-9_.+!-]+")
CHANNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*")
MD5 = re.compile(r"[0-9a-f]{32}")
SHA256 = re.compile(r"[0-9a-f]{64}")
# RFC 3986's characters, less the fragment's '#' (the explicit lock appends '#md5') and the
# quote "'" (pip splits a requirements line's options with shlex): no space, no newline, no
# control character, nothing non-ASCII.
URL = re.compile(r"(https?|file)://[A-Za-z0-9\-._~:/?\[\]@!$&()*+,;=%]+")
URL_SCHEMES = ("http", "https", "file")

# conda's subdirs (conda/base/constants.py KNOWN_SUBDIRS, 24.7).
KNOWN_SUBDIRS = frozenset(
    {
        "emscripten-wasm32",
        "wasi-wasm32",
        "freebsd-64",
        "linux-32",
        "linux-64",
        "linux-aarch64",
        "linux-armv6l",
        "linux-armv7l",
        "linux-ppc64",
        "linux-ppc64le",
        "linux-riscv64",
        "linux-s390x",
        "noarch",
        "osx-64",
        "osx-arm64",
        "win-32",
        "win-64",
        "win-arm64",
        "zos-z",
    }
)

# conda-meta/state ``env_vars``: conda 24.7's activators paste each value between quotes, as is
# (conda/activate.py ``export_var_tmpl``): posix ``export K='V'``, csh ``setenv K "V"``, fish
# ``set -gx K "V"``, xonsh ``$K = 'V'`` (a Python string literal), cmd ``@SET "K=V"`` in a .bat,
# PowerShell ``$Env:K = "V"``. A character that ends such a quote, expands inside it or is an
# escape there cannot be carried verbatim; which shell reads it how:
STATE_VALUE_BREAKERS: Mapping[str, str] = {
    "'": "ends posix sh's and xonsh's quotes",
    '"': "ends csh's, fish's and PowerShell's quotes",
    "$": "expands in csh, fish and PowerShell",
    "`": "runs a command in csh and escapes in PowerShell",
    "!": "is history substitution in csh (even in conda's eval)",
    "%": "expands in cmd's .bat",
    "\u201c": "is a double quote to PowerShell",
    "\u201d": "is a double quote to PowerShell",
    "\u201e": "is a double quote to PowerShell",
}
# A backslash is literal in posix single quotes, csh, cmd and PowerShell, and in fish's double
# quotes except before these; xonsh reads the value as a Python literal, where these start
# escapes (a trailing backslash escapes the closing quote).
_BACKSLASH_ESCAPES = frozenset("\\'\"abfnrtv01234567xNuU$\n")
CONDA_UNSET = "***unset***"  # conda's state file: "unset this variable" (CONDA_ENV_VARS_UNSET_VAR)


def state_value_problem(value: str) -> str | None:
    """Why conda's activators cannot carry ``value`` verbatim, naming the character; or None."""
    if value == CONDA_UNSET:
        return f"'{CONDA_UNSET}' is conda's marker for 'unset this variable'"
    for index, char in enumerate(value):
        if char in STATE_VALUE_BREAKERS:
            return f"it contains {_show(char)}, which {STATE_VALUE_BREAKERS[char]}"
        if char == "\\":
            following = value[index + 1 : index + 2]
            if not following:
                return "it ends with a backslash, which escapes xonsh's closing quote"
            if following in _BACKSLASH_ESCAPES:
                return (
                    f"it contains a backslash followed by {_show(following)}, an escape in "
                    "xonsh (a Python string literal) or fish"
                )
        elif unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return f"it contains the control character {_show(char)}"
    return None


def check_state_variables(variables: Mapping[str, str], where: str) -> None:
    """Refuse project variables that conda-meta/state cannot hold safely: the name must be an
    identifier and the value must pass ``state_value_problem``. ``where`` names the source."""
    for name, value in variables.items():
        if not isinstance(name, str) or not VARIABLE_NAME.fullmatch(name):
            raise UserInputError(
                f"{where}: {name!r} is not an environment variable name",
                "use letters, digits and '_', not starting with a digit",
            )
        if RESERVED_VARIABLE.fullmatch(name):
            raise UserInputError(
                f"{where}: {name} is set by conda or by the combo's activation scripts",
                RESERVED_HINT,
            )
        if REDIRECTING_VARIABLE.fullmatch(name):
            raise UserInputError(
                f"{where}: {name} decides which programs, libraries or start-up code run",
                REDIRECTING_HINT,
            )
        if not isinstance(value, str):
            raise UserInputError(f"{where}: the value of {name} is not a string")
        problem = state_value_problem(value)
        if problem:
            raise UserInputError(
                f"{where}: the value of {name} cannot be set by conda's activators: {problem}",
                "conda pastes these values into every shell's activation as they are; drop the "
                "character (on Windows, write paths with '/' instead of '\\')",
            )


def url_problem(url: str) -> str | None:
    """Why ``url`` may not reach a requirements file, an explicit lock or a download; or None."""
    if not isinstance(url, str) or not url:
        return "it is empty"
    # conda-lock writes a channel token as this placeholder (conda.anaconda.org/t/<TOKEN>/...).
    url = url.replace("/t/<TOKEN>/", "/t/TOKEN/", 1)
    if not (url.isascii() and url.isprintable()) or " " in url:  # outside '!'..'~'
        bad = next(c for c in url if not (33 <= ord(c) <= 126))
        return f"it contains {_show(bad)}"
    if not URL.fullmatch(url):
        scheme = url.partition("://")[0] if "://" in url else ""
        if scheme not in URL_SCHEMES:
            return "it is not an http(s):// or file:// URL"
        bad = next(c for c in url if not re.fullmatch(r"[A-Za-z0-9\-._~:/?\[\]@!$&()*+,;=%]", c))
        return f"it contains {_show(bad)}"
    # Judged as the readers parse it (urllib's urlsplit, then unquote: pkgcache.local_path,
    # pypi.fetch_verified), not as the text looks: a file:// URL's query or an encoded '/' once
    # let "x.tar.bz2?/../../etc/passwd" look like a package and read another file.
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.query or "?" in url:
            return "a file:// URL has a query ('?'), which names no file"
        if parts.netloc not in ("", "localhost"):
            return f"a file:// URL names the host {parts.netloc!r}; use file:///PATH"
    encoded = parts.path.lower()
    if "%2f" in encoded or "%5c" in encoded or "\\" in parts.path:
        return "its path has an encoded '/' or a backslash"
    if any(s in (".", "..") for s in unquote(parts.path).split("/")[1:]):
        return "it has a '.' or '..' path segment"
    return None


def channel_problem(channel: str) -> str | None:
    """A channel as conda-lock and the manifest write it: an http(s)/file URL, or a name
    (conda-forge, defaults, pytorch/label/nightly). None when it is fine."""
    if "://" in channel:
        return url_problem(channel)
    if not CHANNEL_NAME.fullmatch(channel) or ".." in channel.split("/"):
        return "it is neither a channel name nor an http(s):// or file:// URL"
    return None


def text_problem(text: str) -> str | None:
    """One line of printable text (a match spec, a requirement): no newline or other control
    character that would start a new line or option in the file it is written into."""
    bad = next((c for c in text if not c.isprintable()), None)
    return f"it contains {_show(bad)}" if bad is not None else None


MARKER_KEYS = ("lock", "platform", "combo", "environment")
MARKER_HINT = "recreate the environment with 'envfactory create --force'"


def parse_marker(text: str, where: str, platforms: Collection[str]) -> dict[str, str]:
    """``conda-meta/envfactory.json`` (which lock built a prefix), checked: a JSON object whose
    known keys are strings, ``lock`` and ``platform`` (one of ``platforms``) present, names
    plain."""
    doc = _json_object(text, where, MARKER_HINT)
    out: dict[str, str] = {}
    for key in MARKER_KEYS:
        value = doc.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise UserInputError(f"{where}: '{key}' is not a string", MARKER_HINT)
        out[key] = value
    for key in ("lock", "platform"):
        if key not in out:
            raise UserInputError(f"{where}: '{key}' is missing", MARKER_HINT)
    if out["platform"] not in platforms:
        raise UserInputError(f"{where}: unknown platform {out['platform']!r}", MARKER_HINT)
    for key in ("combo", "environment"):
        if key in out and not PLAIN_NAME.fullmatch(out[key]):
            raise UserInputError(f"{where}: '{key}' {out[key]!r} is not a plain name", MARKER_HINT)
    return out


def parse_state_variables(text: str, where: str) -> dict[str, str]:
    """``conda-meta/state``'s ``env_vars`` as strings. The user may have set more with ``conda
    env config vars set``; the kernel writes them literally, so only the types are checked."""
    doc = _json_object(text, where, MARKER_HINT)
    variables = doc.get("env_vars", {})
    if not isinstance(variables, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in variables.items()
    ):
        raise UserInputError(f"{where}: 'env_vars' is not a mapping of strings", MARKER_HINT)
    return dict(variables)


def _json_object(text: str, where: str, hint: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UserInputError(f"{where} is not JSON: {exc}", hint) from None
    if not isinstance(doc, dict):
        raise UserInputError(f"{where} is not a JSON object", hint)
    return doc


def _show(char: str) -> str:
    if char.isprintable() and not char.isspace():
        return f"'{char}'"
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" ({name})" if name else "")


# --------------------------------------------------------------------------------------------
# Credentials in channel URLs: kept out of every file and message, as conda does.
# conda masks an anaconda.org token in a URL as "/t/<TOKEN>/" (conda-lock's
# ``Channel.conda_token_replaced_url``; mamba's ``split_anaconda_token`` finds it with
# "/t/([a-zA-Z0-9-]*)") and drops a URL's "user:password@" (conda's ``remove_auth``) before a
# URL reaches a lock, an explicit file or ``conda list --explicit``.

TOKEN_PLACEHOLDER = "<TOKEN>"
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*(?:<TOKEN>[^\s'\"<>]*)*")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
_TOKEN = re.compile(r"/t/(?!<TOKEN>/)[A-Za-z0-9_-]+(?=/|$)")


def redact_url(url: str) -> str:
    """``url`` without credentials: no ``user:password@``, and in an http(s) URL a ``/t/TOKEN/``
    segment masked as ``/t/<TOKEN>/``. Everything else is kept as written (a local channel
    directory called ``t`` stays)."""
    url = _USERINFO.sub(r"\1", url)
    if url.startswith(("http://", "https://")):
        url = _TOKEN.sub(f"/t/{TOKEN_PLACEHOLDER}", url, count=1)
    return url


def has_credentials(url: str) -> bool:
    return redact_url(url) != url


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it removed (``redact_url``): for messages,
    which quote URLs and the exceptions of HTTP libraries that quote them too. A token found in
    a URL is masked wherever else its ``/t/TOKEN`` segment appears: requests quotes the path
    alone ("Max retries exceeded with url: /t/TOKEN/...")."""
    if "://" not in text:
        return text
    tokens: set[str] = set()
    for found in _URL_IN_TEXT.finditer(text):
        url = found.group(0)
        if url.startswith(("http://", "https://")):
            tokens.update(t.group(0) for t in _TOKEN.finditer(url))
    text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    for token in sorted(tokens, key=len, reverse=True):
        text = text.replace(token, f"/t/{TOKEN_PLACEHOLDER}")
    return text


# --------------------------------------------------------------------------------------------
# Text that reaches a terminal: a log pasted into ``explain``, a string from a lock quoted in a
# message. A terminal obeys escape sequences: OSC 52 writes the clipboard, OSC 0 the window title,
# CSI 2J clears the screen, CR and BS overwrite what was printed. They are removed,
# whole sequences first, then every other C0/C1 control character but newline and tab, and the
# bidirectional overrides that reorder what is shown (CVE-2021-42574, "Trojan Source").

_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL or ST
    r"|\x1b[P^_X][^\x1b]*(?:\x1b\\)?"  # DCS, PM, APC, SOS ... ST
    r"|\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|\x9d[^\x07\x9c]*[\x07\x9c]?"  # 8-bit OSC
    r"|\x1b[ -/]*[0-~]?"  # other ESC sequences (charset, keypad, RIS)
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_text(text: str) -> str:
    """``text`` with escape sequences and control characters removed (newline and tab kept)."""
    if text.isprintable():
        return text
    return _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", text))


def safe_text(text: str) -> str:
    """What may be printed: credentials redacted, escape sequences and controls removed."""
    return terminal_text(redact(text))
