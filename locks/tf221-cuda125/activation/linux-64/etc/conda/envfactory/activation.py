"""envfactory's activation algorithm, written once; the environment's own Python runs it.

``<prefix>/bin/python -I -S etc/conda/envfactory/activation.py activate|deactivate SHELL COMBO``
(the stubs in activate.d/deactivate.d import it and call ``main``) reads the environment and
the plan ``envfactory-COMBO.json`` next to it, and prints the edits for SHELL (sh, csh, fish, xonsh,
powershell; for cmd it writes OUT.bat). When a name or value cannot be written for that shell,
or anything fails, it prints one line to stderr, no edits, and exits 1: nothing changes.
envfactory imports this module too (the foreign-CUDA rule for doctor, kernel, the tests).
Python 3.6+, standard library only: type comments, not annotations, keep mypy --strict on it.

State: ``_ENVFACTORY_<CONDA_SHLVL>`` (ASCII JSON) records what one level changed; deactivate
undoes it on the *current* values (removed entries go back before their anchor, counted from
the end; the user's later edits stay). ``_ENVFACTORY_CARRY`` holds a PATH undo that conda's
switch order would overwrite, for the next activation to apply. docs/activation.md says why.
"""

import os
import sys

MYPY = False
if MYPY:  # typing costs start-up time in the environment's Python; only mypy reads it
    from typing import Any, Callable, Dict  # noqa: UP035

    Plan = Dict[str, Any]  # noqa: UP006
    IsDir = Callable[[str], bool]

STATE = "_ENVFACTORY_"
CARRY = "_ENVFACTORY_CARRY"
SHELLS = ("sh", "csh", "fish", "xonsh", "cmd", "powershell")

# No json, no re: importing them (enum, functools, collections...) costs more start-up time
# than the whole algorithm; a small JSON codec of its own is below.
_DIGITS = "0123456789"
_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
_REST = _FIRST + _DIGITS


class Refused(Exception):
    """A value or name cannot be written for the shell: nothing is printed, nothing changes."""


def valid_name(name):
    # type: (str) -> bool
    """A variable name every shell reads as one word: ``[A-Za-z_][A-Za-z0-9_]*`` (issue 10: an
    inherited CUDA_PATH_V* name that is not one is left alone and never printed)."""
    return bool(name) and name[0] in _FIRST and all(c in _REST for c in name)


def _cuda_versioned(part):
    # type: (str) -> bool
    """``cuda-X[.Y...]``: NVIDIA's versioned install directories."""
    numbers = part[5:].split(".") if part.startswith("cuda-") else []
    return bool(numbers) and all(n and all(c in _DIGITS for c in n) for n in numbers)


# --- the foreign-CUDA rule (doctor uses the same function) -----------------------------------


def components(path, os_name):
    # type: (str, str) -> list[str]
    """``path`` split into components; Windows: either slash, case folded."""
    if os_name == "windows":
        return [c for c in path.replace("/", "\\").lower().split("\\") if c]
    return [c for c in path.split("/") if c]


def foreign_cuda(path, os_name):
    # type: (str, str) -> bool
    """Whether ``path`` lies in a CUDA or cuDNN install of its own (not a conda environment's).

    Sources: NVIDIA's Linux post-install steps (/usr/local/cuda-X.Y/bin, lib64; /usr/local/cuda
    the symlink), Arch's /opt/cuda; NVIDIA's Windows installer (C:\\Program Files\\NVIDIA GPU
    Computing Toolkit\\CUDA\\vX.Y\\bin, libnvvp); TensorFlow's old Windows guide (C:\\tools\\cuda
    \\bin, cuDNN unpacked to C:\\tools\\cuda or its own folder); cuDNN's tarball and zip
    (cudnn-*, cudnn). Linear time: no backtracking pattern over the path.
    """
    parts = components(path, os_name)
    for part in parts:
        if part.startswith("cudnn") or _cuda_versioned(part):
            return True
    if os_name == "windows":
        for i in range(len(parts) - 1):
            if parts[i] == "nvidia gpu computing toolkit" and parts[i + 1] == "cuda":
                return True
        # C:\tools\cuda (any drive)
        return len(parts) >= 3 and parts[1] == "tools" and parts[2].startswith("cuda")
    if parts[:2] == ["usr", "local"] and len(parts) >= 3 and parts[2].startswith("cuda"):
        return path.startswith("/")
    if parts[:1] == ["opt"] and len(parts) >= 2 and parts[1].startswith("cuda"):
        return path.startswith("/")
    return False


def inside(path, prefix, os_name):
    # type: (str, str, str) -> bool
    if not prefix:
        return False
    p, root = components(path, os_name), components(prefix, os_name)
    absolute = path.startswith("/") == prefix.startswith("/")
    return absolute and p[: len(root)] == root


def foreign(entry, prefix, plan, is_dir):
    # type: (str, str, Plan, IsDir) -> bool
    """The activation's rule: a foreign CUDA directory outside ``prefix``, or another conda
    environment's library directory (``<p>/lib``, ``<p>\\Library\\bin`` with ``<p>/conda-meta``)."""
    os_name = plan["os"]
    if not entry or inside(entry, prefix, os_name):
        return False
    if foreign_cuda(entry, os_name):
        return True
    dirsep = plan["dirsep"]
    trimmed = entry[:-1] if len(entry) > 1 and entry.endswith(dirsep) else entry
    suffix = plan["env_lib_suffix"]
    fold = os_name == "windows"
    probe = trimmed.lower() if fold else trimmed
    if not suffix or not probe.endswith(suffix.lower() if fold else suffix):
        return False
    base = trimmed[: len(trimmed) - len(suffix)]
    return bool(base) and is_dir(base + dirsep + "conda-meta")


# --- the plan --------------------------------------------------------------------------------


def resolve(value, prefix, plan):
    # type: (list[str], str, Plan) -> str
    kind, text = value
    if kind == "literal":
        return text
    return prefix + plan["dirsep"] + text if text else prefix


def targets(plan, prefix):
    # type: (Plan, str) -> tuple[list[tuple[str, list[str]]], dict[str, str | None]]
    """The plan resolved against ``prefix``: (list variable, directories first) pairs, and the
    variables it sets (a value) or unsets (None) -- ``kernel`` writes the same."""
    lists = [(name, [resolve(v, prefix, plan) for v in values]) for name, values in plan["lists"]]
    wanted = {name: resolve(value, prefix, plan) for name, value in plan["set"]}  # type: dict[str, str | None]
    for name in plan["unset"]:
        wanted[name] = None
    return lists, wanted


def level(env):
    # type: (dict[str, str]) -> str
    shlvl = env.get("CONDA_SHLVL", "").strip()
    return shlvl if shlvl and all(c in "0123456789" for c in shlvl) else "0"


def _split(value, sep):
    # type: (str | None, str) -> list[str]
    return value.split(sep) if value else []


def _same(a, b, fold):
    # type: (str, str, bool) -> bool
    return a.lower() == b.lower() if fold else a == b


# --- undo ------------------------------------------------------------------------------------


def undo_list(current, record, sep, fold):
    # type: (str | None, Dict[str, Any], str, bool) -> str | None
    """The list variable with one recorded edit undone, from its *current* value."""
    entries = _split(current, sep)
    if current == "" and record.get("one_empty"):
        entries = [""]  # activation left one empty entry, which joins to ""
    for added in record["added"]:
        for i, item in enumerate(entries):
            if _same(item, added, fold):
                del entries[i]
                break
    for value, anchor, occ in record["removed"]:
        at = len(entries)
        if anchor is not None:
            seen = 0
            for j in range(len(entries) - 1, -1, -1):
                if entries[j] == anchor:
                    if seen == occ:
                        at = j
                        break
                    seen += 1
        entries.insert(at, value)
    if entries:
        return sep.join(entries)
    return None if record["was"] == "unset" else ""


def conda_blocks(env, plan):
    # type: (dict[str, str], Plan) -> int
    """How often CONDA_PREFIX's first PATH directory (conda's block) is on PATH. conda removes
    one before it runs deactivate.d on a plain deactivate, none on a switch or a reactivate."""
    prefix = env.get("CONDA_PREFIX", "")
    if not prefix:
        return 0
    fold = plan["os"] == "windows"
    head = prefix.rstrip("\\/") if fold else prefix.rstrip("/") + "/bin"
    return sum(1 for e in _split(env.get("PATH"), plan["sep"]) if _same(e, head, fold))


def _load(text, what):
    # type: (str | None, str) -> object
    if text is None:
        return None
    try:
        value, end = _parse(text, _skip(text, 0))
        if _skip(text, end) != len(text):
            raise ValueError(end)
        return value
    except (ValueError, IndexError):
        raise Refused("cannot read " + what + " (not envfactory's JSON)") from None


def deactivate(env, plan, defer_path=True):
    # type: (dict[str, str], Plan, bool) -> dict[str, str | None]
    """Undo this level's record; return {name: new value, or None to unset}."""
    key = STATE + level(env)
    record = _load(env.get(key), key)
    if not isinstance(record, dict):
        return {}
    sep, fold = plan["sep"], plan["os"] == "windows"
    changes = {}  # type: dict[str, str | None]
    blocks = record.get("blocks", 0)
    carry = defer_path and blocks > 0 and conda_blocks(env, plan) >= blocks
    for name, edit in sorted(record["lists"].items()):
        if name == "PATH" and carry:
            layers = _load(env.get(CARRY), CARRY) or []
            changes[CARRY] = _dump([*layers, edit])  # type: ignore[misc]
            continue
        value = undo_list(env.get(name), edit, sep, fold)
        if value != env.get(name):
            changes[name] = value
    for name, old_new in sorted(record["vars"].items()):
        old, new = old_new
        if env.get(name) == new and old != new:  # still what activation left: give back OLD
            changes[name] = old
    changes[key] = None
    return changes


def _dump(data):
    # type: (object) -> str
    """JSON, ASCII only, keys sorted, no spaces (``json.dumps(data, ensure_ascii=True,
    sort_keys=True, separators=(",", ":"))``, which the tests hold it to)."""
    if data is None:
        return "null"
    if data is True or data is False:
        return "true" if data else "false"
    if isinstance(data, int):
        return str(data)
    if isinstance(data, str):
        out = []
        for char in data:
            if char in _ESCAPES:
                out.append(_ESCAPES[char])
            elif " " <= char <= "~":
                out.append(char)
            else:
                out.extend("\\u%04x" % u for u in _utf16_units(char))  # noqa: UP031
        return '"' + "".join(out) + '"'
    if isinstance(data, (list, tuple)):
        return "[" + ",".join(_dump(item) for item in data) + "]"
    if isinstance(data, dict):
        items = sorted(data.items())
        return "{" + ",".join(_dump(k) + ":" + _dump(v) for k, v in items) + "}"
    raise TypeError(type(data).__name__)


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPES.update({"\b": "\\b", "\f": "\\f"})
_UNESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}
_UNESCAPES["/"] = "/"


def _skip(text, at):
    # type: (str, int) -> int
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _parse(text, at):
    # type: (str, int) -> tuple[Any, int]
    """One JSON value of ``text`` from ``at`` (no floats: the plan and the state hold none)."""
    char = text[at]
    if char == '"':
        out = []  # type: list[str]
        at += 1
        while text[at] != '"':
            if text[at] == "\\":
                code = text[at + 1]
                if code == "u":
                    out.append(chr(int(text[at + 2 : at + 6], 16)))
                    at += 6
                    continue
                out.append(_UNESCAPES[code])
                at += 2
                continue
            out.append(text[at])
            at += 1
        units = "".join(out).encode("utf-16-le", "surrogatepass")
        return units.decode("utf-16-le", "surrogatepass"), at + 1  # \ud83d\ude00: one character
    if char in "[{":
        close, items, pairs = "]" if char == "[" else "}", [], {}  # type: str, list[Any], dict[str, Any]
        at = _skip(text, at + 1)
        while text[at] != close:
            if char == "{":
                key, at = _parse(text, at)
                at = _skip(text, at)
                if text[at] != ":" or not isinstance(key, str):
                    raise ValueError(at)
                value, at = _parse(text, _skip(text, at + 1))
                pairs[key] = value
            else:
                value, at = _parse(text, at)
                items.append(value)
            at = _skip(text, at)
            if text[at] == ",":
                at = _skip(text, at + 1)
                if text[at] == close:
                    raise ValueError(at)
            elif text[at] != close:
                raise ValueError(at)
        return (items if char == "[" else pairs), at + 1
    for word, value in (("null", None), ("true", True), ("false", False)):
        if text.startswith(word, at):
            return value, at + len(word)
    end = at + 1 if char == "-" else at
    while end < len(text) and text[end] in _DIGITS:
        end += 1
    if end == at or text[at:end] == "-":
        raise ValueError(at)
    return int(text[at:end]), end


def _apply(env, changes):
    # type: (dict[str, str], dict[str, str | None]) -> dict[str, str]
    out = dict(env)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def activate(env, plan, is_dir):
    # type: (dict[str, str], Plan, IsDir) -> dict[str, str | None]
    """Apply ``plan`` to ``env``; return {name: new value, or None to unset}."""
    changes = {}  # type: dict[str, str | None]
    work = dict(env)
    sep, fold = plan["sep"], plan["os"] == "windows"
    layers = _load(work.get(CARRY), CARRY)
    if layers is not None:
        path = work.get("PATH")
        for layer in reversed(layers):  # type: ignore[call-overload]
            path = undo_list(path, layer, sep, fold)
        changes.update({"PATH": path, CARRY: None})
        work = _apply(work, changes)
    undone = deactivate(work, plan, defer_path=False)
    changes.update(undone)
    work = _apply(work, undone)
    prefix = work.get("CONDA_PREFIX", "")
    if not prefix:
        raise Refused("CONDA_PREFIX is not set")
    key = STATE + level(work)
    lists, wanted = targets(plan, prefix)
    record = {"combo": plan["combo"], "lists": {}, "vars": {}}  # type: Dict[str, Any]
    record["blocks"] = conda_blocks(work, plan)
    for name, added in lists:
        current = work.get(name)
        kept, removed = [], []  # type: list[str], list[tuple[str, int]]
        for entry in _split(current, sep):
            if foreign(entry, prefix, plan, is_dir):
                removed.append((entry, len(kept)))
            else:
                kept.append(entry)
        undo = []
        for entry, follower in removed:
            if follower < len(kept):
                anchor = kept[follower]
                undo.append([entry, anchor, kept[follower + 1 :].count(anchor)])
            else:
                undo.append([entry, None, 0])
        was = "unset" if current is None else "empty" if current == "" else "set"
        entries = added + kept
        edit = {"was": was, "added": added, "removed": undo}  # type: Dict[str, Any]
        if entries == [""]:
            edit["one_empty"] = True
        record["lists"][name] = edit
        value = sep.join(entries) if entries else None
        if value != current:
            changes[name] = value
    for name in sorted(work):
        if name.startswith(tuple(plan["unset_prefixes"])) and valid_name(name):
            wanted[name] = None
    for name in sorted(wanted):
        old, new = work.get(name), wanted[name]
        if old != new:
            record["vars"][name] = [old, new]
            changes[name] = new
    changes[key] = _dump(record)
    return changes


# --- the shells ------------------------------------------------------------------------------


def _check_name(name):
    # type: (str) -> None
    if not valid_name(name):
        raise Refused("the variable name " + repr(name) + " cannot be written for a shell")


def _no_surrogates(name, value, shell):
    # type: (str, str, str) -> None
    for char in value:
        if "\ud800" <= char <= "\udfff":
            raise Refused(
                name + " holds bytes that are not text (undecodable), which " + shell
                + " cannot be given exactly"
            )


def sh_quote(text):
    # type: (str) -> str
    """POSIX sh (bash, zsh, dash): single quotes; a quote is written as ``'\\''``."""
    return "'" + text.replace("'", "'\\''") + "'"


def csh_quote(text):
    # type: (str) -> str
    """csh/tcsh: single quotes; ``!`` still triggers history substitution there, so ``\\!``;
    a line break cannot be written."""
    if "\n" in text or "\r" in text:
        raise Refused("csh cannot hold a line break")
    return "'" + text.replace("'", "'\\''").replace("!", "\\!") + "'"


def fish_quote(text):
    # type: (str) -> str
    """fish: single quotes, in which only backslash and the quote need a backslash."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def powershell_expr(text):
    # type: (str) -> str
    """PowerShell, in ASCII only (native command output is read in the console's code page):
    runs of printable ASCII in single quotes (a quote doubled), every other UTF-16 code unit
    as ``[char]0xHHHH``, joined with ``+`` after a leading string."""
    tokens, run = [], ""  # type: list[str], str
    for unit in _utf16_units(text):
        if 0x20 <= unit <= 0x7E:
            run += "''" if unit == 0x27 else chr(unit)
            continue
        if run or not tokens:
            tokens.append("'" + run + "'")
            run = ""
        tokens.append(f"[char]0x{unit:04X}")
    if run or not tokens:
        tokens.append("'" + run + "'")
    return " + ".join(tokens)


def _utf16_units(text):
    # type: (str) -> list[int]
    data = text.encode("utf-16-le", "surrogatepass")
    return [data[i] | data[i + 1] << 8 for i in range(0, len(data), 2)]


def emit_sh(changes, env):
    # type: (dict[str, str | None], dict[str, str]) -> str
    lines = []
    for name, value in sorted(changes.items()):
        _check_name(name)
        if value is None:
            if name in env:
                lines.append("unset " + name)
        else:
            lines.append("export " + name + "=" + sh_quote(value))
    return "".join(line + "\n" for line in lines)


def emit_csh(changes, env):
    # type: (dict[str, str | None], dict[str, str]) -> str
    lines = []
    for name, value in sorted(changes.items()):
        _check_name(name)
        if value is None:
            if name in env:
                lines.append("unsetenv " + name)
        else:
            try:
                lines.append("setenv " + name + " " + csh_quote(value))
            except Refused as err:
                raise Refused(f"{err} (in {name})") from None
    return "".join(line + "\n" for line in lines)


def emit_fish(changes, env):
    # type: (dict[str, str | None], dict[str, str]) -> str
    lines = []
    for name, value in sorted(changes.items()):
        _check_name(name)
        if value is None:
            if name in env:
                lines.append("set -e " + name)
        else:
            _no_surrogates(name, value, "fish")
            lines.append("set -gx " + name + " " + fish_quote(value))
    return "".join(line + "\n" for line in lines)


def emit_xonsh(changes, env):
    # type: (dict[str, str | None], dict[str, str]) -> str
    """One JSON object {name: value or null}; the .xsh script applies it to ``${...}``."""
    for name, value in changes.items():
        _check_name(name)
        if value is not None:
            _no_surrogates(name, value, "xonsh")
    return _dump({k: v for k, v in changes.items() if v is not None or k in env}) + "\n"


def emit_powershell(changes, env):
    # type: (dict[str, str | None], dict[str, str]) -> str
    """Two statement forms: ``$Env:NAME = <expr>`` and ``$Env:NAME = $null`` (which removes
    it; PowerShell has no empty environment variables)."""
    lines = []
    for name, value in sorted(changes.items()):
        _check_name(name)
        if not value:
            if name in env:
                lines.append("$Env:" + name + " = $null")
        else:
            lines.append("$Env:" + name + " = " + powershell_expr(value))
    return "".join(line + "\n" for line in lines)


CMD_MAX_LINE = 8191  # cmd's limit on one line of a batch file


def _cmd_sources(env, text, own):
    # type: (dict[str, str], str, str) -> str | None
    """``%NAME:~OFFSET,LENGTH%`` of a variable that holds ``text`` now (offsets in UTF-16)."""
    for name in [own, *sorted(env)]:
        value = env.get(name)
        if value is None or not valid_name(name):
            continue
        at = value.find(text)
        if at >= 0:
            offset = len(_utf16_units(value[:at]))
            return "%" + name + ":~" + str(offset) + "," + str(len(_utf16_units(text))) + "%"
    return None


def emit_cmd(changes, env, delayed=False):
    # type: (dict[str, str | None], dict[str, str], bool) -> str
    """A .bat of ``@set NAME=VALUE`` lines that cmd reads back as exactly VALUE, pure ASCII
    (cmd reads batch files in the OEM code page): runs of characters outside ASCII are copied,
    as substrings of the variables that hold them now, into the helper _EFY_U on the first
    line, and taken from there. No quotes around the assignment: every character cmd treats
    specially, the quote included, gets a caret, % is doubled. (Wine's cmd does not toggle
    caret processing at quotes inside ``set "..."`` as cmd does: this form reads the same on
    both.) Refused: control characters, a "!" while delayed expansion is on, a line over
    8191 characters, a character no variable holds."""
    refs, at, size = [], {}, [0]  # type: list[str], dict[str, int], list[int]

    def run_ref(own, text):
        # type: (str, str) -> str
        if text not in at:
            ref = _cmd_sources(env, text, own)
            if ref is None:
                if len(text) > 1:  # no variable holds the whole run: one character at a time
                    return "".join(run_ref(own, c) for c in text)
                raise Refused(
                    f"{own} would hold the character U+{ord(text):04X}, which no variable "
                    "of the environment holds to copy it from"
                )
            at[text] = size[0]
            refs.append(ref)
            size[0] += len(_utf16_units(text))
        return "%_EFY_U:~" + str(at[text]) + "," + str(len(_utf16_units(text))) + "%"

    lines = []
    for name, value in sorted(changes.items()):
        _check_name(name)
        if not value:  # cmd has no empty variables
            if name in env:
                lines.append("@set " + name + "=")
            continue
        _no_surrogates(name, value, "cmd")
        out, i = ["@set " + name + "="], 0
        while i < len(value):
            char = value[i]
            if ord(char) > 126:
                end = i
                while end < len(value) and ord(value[end]) > 126:
                    end += 1
                out.append(run_ref(name, value[i:end]))
                i = end
                continue
            if char < " " and char != "\t":
                raise Refused(
                    f"{name} would hold the control character U+{ord(char):04X}, which cmd "
                    "cannot read back from a batch file"
                )
            if char == "!" and delayed:
                raise Refused(name + ' would hold a "!" and delayed expansion is on')
            if char == "%":
                char = "%%"
            elif char in '^&|<>()"':
                char = "^" + char
            out.append(char)
            i += 1
        lines.append("".join(out))
    if refs:
        lines.insert(0, "@set _EFY_U=" + "".join(refs))
        lines.append("@set _EFY_U=")
    for line in lines:
        if len(line) > CMD_MAX_LINE:
            raise Refused(
                f"a line of the .bat would be {len(line)} characters, over cmd's limit of "
                f"{CMD_MAX_LINE}"
            )
    return "".join(line + "\r\n" for line in lines)


EMITTERS = {
    "sh": emit_sh,
    "csh": emit_csh,
    "fish": emit_fish,
    "xonsh": emit_xonsh,
    "powershell": emit_powershell,
}


# --- the command line the activate.d/deactivate.d scripts run --------------------------------


def read_plan(combo):
    # type: (str) -> Plan
    if not combo or not all(c in _REST + ".-" for c in combo) or combo[0] in "._-":
        raise Refused("bad combo name " + repr(combo))
    # os.path, not pathlib: every import is start-up time of each activation
    here = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120
    plan_file = os.path.join(here, "envfactory-" + combo + ".json")  # noqa: PTH118
    with open(plan_file, encoding="utf-8") as f:  # noqa: PTH123
        plan = _load(f.read(), plan_file)
    if not isinstance(plan, dict) or plan.get("format") != 1:
        raise Refused("the plan of " + combo + " is not envfactory's (format 1)")
    return plan


def environment(plan):
    # type: (Plan) -> dict[str, str]
    env = dict(os.environ)
    if plan["os"] == "windows":  # Windows names are case-insensitive; Python gives them upper
        env = {k.upper(): v for k, v in env.items()}
    return env


def run(argv, env=None, is_dir=os.path.isdir):
    # type: (list[str], dict[str, str] | None, IsDir) -> tuple[int, bytes, str]
    """(exit status, output, message) for ``argv``: op shell combo [cmd: OUT.bat 0|1]."""
    if len(argv) < 3 or argv[0] not in ("activate", "deactivate") or argv[1] not in SHELLS:
        return 2, b"", "usage: activation.py activate|deactivate SHELL COMBO [OUT.bat 0|1]"
    op, shell, combo = argv[:3]
    try:
        plan = read_plan(combo)
        if env is None:
            env = environment(plan)
        changes = activate(env, plan, is_dir) if op == "activate" else deactivate(env, plan)
        if shell == "cmd":
            if len(argv) != 5:
                return 2, b"", "usage: activation.py OP cmd COMBO OUT.bat 0|1"
            text = emit_cmd(changes, env, delayed=argv[4] == "1")
            return 0, text.encode("ascii"), ""
        text = EMITTERS[shell](changes, env)
        if shell in ("xonsh", "powershell"):
            return 0, text.encode("ascii"), ""
        return 0, os.fsencode(text), ""
    except Refused as err:
        return 1, b"", f"envfactory ({combo}): {op} refused: {err}; nothing was changed"
    except Exception as err:  # the environment stays as it is, whatever went wrong
        why = f"{type(err).__name__}: {err}"
        return 1, b"", f"envfactory ({combo}): {op} failed ({why}); nothing was changed"


def main(argv):
    # type: (list[str]) -> int
    """The stubs run ``python -I -S -c "...; import activation; activation.main(...)"``: an
    import, so the compiled module is cached in __pycache__ (running the file as a script
    compiles all of it on every activation)."""
    status, output, message = run(argv)
    if message:
        sys.stderr.write(message + "\n")
    if status == 0:
        if argv[1] == "cmd":
            with open(argv[3], "wb") as f:  # noqa: PTH123
                f.write(output)
        else:
            sys.stdout.buffer.write(output)
            sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
