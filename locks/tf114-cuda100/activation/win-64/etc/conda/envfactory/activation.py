"""envfactory's activation algorithm, once; the environment's Python runs it (docs/activation.md)

The stubs in activate.d/deactivate.d run ``python -I -S -c "import activation; ..." DIR OP SHELL
COMBO``: this reads the environment and the plan ``envfactory-COMBO.json`` next to it and prints
the edits for SHELL (cmd: writes them to OUT.bat). A name or value the shell cannot carry, or any
failure: one line on stderr, no edits, exit 1, nothing changes. Python 3.6+, ``os`` and ``sys``
only (type comments keep mypy --strict on it); envfactory imports it too (doctor, kernel).

State: ``_ENVFACTORY_<CONDA_SHLVL>`` (ASCII JSON) records what one level changed; deactivate
undoes it on the *current* values (a removed entry goes back before its anchor, counted from the
end; later user edits stay). ``_ENVFACTORY_CARRY`` holds a PATH undo that conda's switch order
would overwrite, for the next activation to apply.
"""

import os
import sys

MYPY = False
if MYPY:  # typing costs start-up time in the environment's Python; only mypy reads it
    from typing import Any, Callable, Dict  # noqa: UP035

    Plan = Dict[str, Any]  # noqa: UP006
    IsDir = Callable[[str], bool]
    Changes = Dict[str, "str | None"]  # noqa: UP006

STATE = "_ENVFACTORY_"
CARRY = "_ENVFACTORY_CARRY"
SHELLS = ("sh", "csh", "fish", "xonsh", "cmd", "powershell")
_DIGITS = "0123456789"
_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
_REST = _FIRST + _DIGITS


class Refused(Exception):
    """A value or name cannot be written for the shell: nothing is printed, nothing changes."""


def valid_name(name):
    # type: (str) -> bool
    """``[A-Za-z_][A-Za-z0-9_]*``: one word in every shell; other names are never printed."""
    return bool(name) and name[0] in _FIRST and all(c in _REST for c in name)


# --- the foreign-CUDA rule (doctor and kernel use it too) ---------------------------------------


def components(path, os_name):
    # type: (str, str) -> list[str]
    if os_name == "windows":  # either slash, case folded
        return [c for c in path.replace("/", "\\").lower().split("\\") if c]
    return [c for c in path.split("/") if c]


def foreign_cuda(path, os_name):
    # type: (str, str) -> bool
    """A directory of a CUDA or cuDNN install of its own: a component ``cuda-X[.Y...]`` or
    ``cudnn*`` (NVIDIA's versioned dirs, cuDNN's archives); ``/usr/local/cuda*``, ``/opt/cuda*``;
    ``...\\NVIDIA GPU Computing Toolkit\\CUDA\\``, ``X:\\tools\\cuda*`` (TF's old Windows guide),
    ``...\\CUDA*\\vX.Y`` (the installer's layout in a custom folder).
    Sources in docs/activation.md. Linear time."""
    parts = components(path, os_name)
    for part in parts:
        numbers = part[5:].split(".") if part.startswith("cuda-") else []
        if part.startswith("cudnn") or (
            numbers and all(n and not n.strip(_DIGITS) for n in numbers)
        ):
            return True
    if os_name == "windows":
        if any(
            parts[i : i + 2] == ["nvidia gpu computing toolkit", "cuda"] for i in range(len(parts))
        ):
            return True
        # the installer's layout in a folder of the user's choice: D:\CUDA\v10.0\bin
        for i in range(len(parts) - 1):
            numbers = parts[i + 1][1:].split(".") if parts[i + 1].startswith("v") else []
            if (
                parts[i].startswith("cuda")
                and numbers
                and all(n and not n.strip(_DIGITS) for n in numbers)
            ):
                return True
        return len(parts) >= 3 and parts[1] == "tools" and parts[2].startswith("cuda")
    top = (
        parts[2:3] if parts[:2] == ["usr", "local"] else parts[1:2] if parts[:1] == ["opt"] else []
    )
    return bool(top) and top[0].startswith("cuda") and path.startswith("/")


def inside(path, prefix, os_name):
    # type: (str, str, str) -> bool
    root = components(prefix, os_name)
    same_kind = path.startswith("/") == prefix.startswith("/")
    return bool(prefix) and same_kind and components(path, os_name)[: len(root)] == root


def foreign(entry, prefix, plan, is_dir):
    # type: (str, str, Plan, IsDir) -> bool
    """Foreign CUDA outside ``prefix``, or another conda environment's library directory
    (``<p>/lib``, ``<p>\\Library\\bin`` where ``<p>/conda-meta`` exists)."""
    os_name, sep, suffix = plan["os"], plan["dirsep"], plan["env_lib_suffix"]
    if not entry or inside(entry, prefix, os_name):
        return False
    if foreign_cuda(entry, os_name):
        return True
    trimmed = entry[:-1] if len(entry) > 1 and entry.endswith(sep) else entry
    fold = os_name == "windows"
    probe = trimmed.lower() if fold else trimmed
    if not suffix or not probe.endswith(suffix.lower() if fold else suffix):
        return False
    base = trimmed[: len(trimmed) - len(suffix)]
    return bool(base) and is_dir(base + sep + "conda-meta")


# --- the plan and its undo -----------------------------------------------------------------


def resolve(value, prefix, plan):
    # type: (list[str], str, Plan) -> str
    kind, text = value
    if kind == "literal":
        return text
    return prefix + plan["dirsep"] + text if text else prefix


def targets(plan, prefix):
    # type: (Plan, str) -> tuple[list[tuple[str, list[str]]], dict[str, str | None]]
    """(list variable, directories first) pairs, and {variable: value, or None to unset}."""
    lists = [(name, [resolve(v, prefix, plan) for v in values]) for name, values in plan["lists"]]
    wanted = {name: resolve(value, prefix, plan) for name, value in plan["set"]}  # type: dict[str, str | None]
    wanted.update((name, None) for name in plan["unset"])
    return lists, wanted


def level(env):
    # type: (dict[str, str]) -> str
    shlvl = env.get("CONDA_SHLVL", "").strip()
    return shlvl if shlvl and all(c in _DIGITS for c in shlvl) else "0"


def _split(value, sep):
    # type: (str | None, str) -> list[str]
    return value.split(sep) if value else []


def _same(a, b, fold):
    # type: (str, str, bool) -> bool
    return a.lower() == b.lower() if fold else a == b


def undo_list(current, record, sep, fold):
    # type: (str | None, Dict[str, Any], str, bool) -> str | None
    """The list variable with one recorded edit undone, from its *current* value."""
    entries = [""] if current == "" and record.get("one_empty") else _split(current, sep)
    for added in record["added"]:
        hits = [i for i, item in enumerate(entries) if _same(item, added, fold)]
        if hits:
            del entries[hits[0]]
    for value, anchor, occ in record["removed"]:
        hits = [j for j in range(len(entries) - 1, -1, -1) if entries[j] == anchor]
        found = anchor is not None and isinstance(occ, int) and 0 <= occ < len(hits)
        entries.insert(hits[occ] if found else len(entries), value)
    if entries:
        return sep.join(entries)
    return None if record["was"] == "unset" else ""


def conda_blocks(env, plan):
    # type: (dict[str, str], Plan) -> int
    """How often CONDA_PREFIX's first PATH directory (conda's block) is on PATH: conda removes
    one before deactivate.d on a plain deactivate, none on a switch or a reactivate."""
    prefix, fold = env.get("CONDA_PREFIX", ""), plan["os"] == "windows"
    head = prefix.rstrip("\\/") if fold else prefix.rstrip("/") + "/bin"
    return sum(_same(e, head, fold) for e in _split(env.get("PATH"), plan["sep"])) if prefix else 0


def _no_number(text):
    # type: (str) -> None
    raise ValueError(text)


class _Syntax:  # what json's scanner reads: strict strings, ints, no floats or NaN
    strict, object_hook, object_pairs_hook = True, None, None
    parse_int, parse_float = int, staticmethod(_no_number)
    parse_constant = parse_float


try:  # json's C half: importing json itself (re, enum, functools...) costs more than all else
    from _json import encode_basestring_ascii as _quote
    from _json import make_scanner

    _scan = make_scanner(_Syntax())  # type: ignore[arg-type]
except ImportError:  # a Python built without it: json's Python half, the same results
    import json

    _quote = json.encoder.encode_basestring_ascii
    _scan = json.JSONDecoder(parse_float=_no_number, parse_constant=_no_number).scan_once  # type: ignore[attr-defined]


def _load(text, what):
    # type: (str | None, str) -> Any
    if text is None:
        return None
    try:
        text = text.strip(" \t\r\n")
        value, end = _scan(text, 0)
        if end == len(text):
            return value
    except (ValueError, StopIteration, IndexError):
        pass
    raise Refused("cannot read " + what + " (not envfactory's JSON)")


def _dump(data):
    # type: (object) -> str
    """``json.dumps(data, ensure_ascii=True, sort_keys=True, separators=(",", ":"))``."""
    if data is None or isinstance(data, bool):
        return {None: "null", True: "true", False: "false"}[data]
    if isinstance(data, (int, str)):
        return _quote(data) if isinstance(data, str) else str(data)
    if isinstance(data, (list, tuple)):
        return "[" + ",".join(_dump(item) for item in data) + "]"
    if isinstance(data, dict):
        return "{" + ",".join(_quote(k) + ":" + _dump(v) for k, v in sorted(data.items())) + "}"
    raise TypeError(type(data).__name__)


def _apply(env, changes):
    # type: (dict[str, str], Changes) -> dict[str, str]
    out = dict(env)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def deactivate(env, plan, defer_path=True):
    # type: (dict[str, str], Plan, bool) -> Changes
    """Undo this level's record: {name: new value, or None to unset}."""
    key = STATE + level(env)
    record = _load(env.get(key), key)
    if not isinstance(record, dict):
        return {}
    sep, fold = plan["sep"], plan["os"] == "windows"
    changes = {key: None}  # type: Changes
    blocks = record.get("blocks", 0)
    carry = defer_path and blocks > 0 and conda_blocks(env, plan) >= blocks
    for name, edit in sorted(record["lists"].items()):
        if name == "PATH" and carry:  # conda's switch: the next activation applies it
            changes[CARRY] = _dump([*(_load(env.get(CARRY), CARRY) or []), edit])
            continue
        value = undo_list(env.get(name), edit, sep, fold)
        if value != env.get(name):
            changes[name] = value
    for name, (old, new) in sorted(record["vars"].items()):
        if env.get(name) == new and old != new:  # still what activation left: give back OLD
            changes[name] = old
    return changes


def activate(env, plan, is_dir):
    # type: (dict[str, str], Plan, IsDir) -> Changes
    """Apply ``plan`` to ``env``: {name: new value, or None to unset}."""
    changes = {}  # type: Changes
    sep, fold = plan["sep"], plan["os"] == "windows"
    layers = _load(env.get(CARRY), CARRY)
    if layers is not None:
        path = env.get("PATH")
        for layer in reversed(layers):
            path = undo_list(path, layer, sep, fold)
        changes.update({"PATH": path, CARRY: None})
    changes.update(deactivate(_apply(env, changes), plan, defer_path=False))
    work = _apply(env, changes)
    prefix = work.get("CONDA_PREFIX", "")
    if not prefix:
        raise Refused("CONDA_PREFIX is not set")
    lists, wanted = targets(plan, prefix)
    record = {"combo": plan["combo"], "lists": {}, "vars": {}}  # type: Dict[str, Any]
    record["blocks"] = conda_blocks(work, plan)
    for name, added in lists:
        current = work.get(name)
        kept, undo = [], []  # type: list[str], list[list[Any]]
        for entry in _split(current, sep):
            if foreign(entry, prefix, plan, is_dir):
                undo.append([entry, len(kept)])
            else:
                kept.append(entry)
        for item in undo:  # anchor: the next kept entry, and how many equal ones follow it
            rest = kept[item[1] :]
            item[1:] = [rest[0], rest[1:].count(rest[0])] if rest else [None, 0]
        entries = added + kept
        was = "unset" if current is None else "empty" if current == "" else "set"
        edit = {"was": was, "added": added, "removed": undo}  # type: Dict[str, Any]
        record["lists"][name] = edit
        if entries == [""]:
            edit["one_empty"] = True
        value = sep.join(entries) if entries else None
        if value != current:
            changes[name] = value
    prefixes = tuple(plan["unset_prefixes"])
    wanted.update((n, None) for n in work if n.startswith(prefixes) and valid_name(n))
    for name in sorted(wanted):
        if work.get(name) != wanted[name]:
            record["vars"][name] = [work.get(name), wanted[name]]
            changes[name] = wanted[name]
    changes[STATE + level(work)] = _dump(record)
    return changes


# --- the shells: each only sets and unsets ---------------------------------------------------


def _text(name, value, shell):
    # type: (str, str, str) -> str
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise Refused(
            name
            + " holds bytes that are not text (undecodable), which "
            + shell
            + " cannot be given exactly"
        )
    return value


def _utf16(text):
    # type: (str) -> list[int]
    data = text.encode("utf-16-le", "surrogatepass")
    return [data[i] | data[i + 1] << 8 for i in range(0, len(data), 2)]


def sh_quote(text):
    # type: (str) -> str
    """bash, zsh, dash: single quotes, a quote written ``'\\''``."""
    return "'" + text.replace("'", "'\\''") + "'"


def csh_quote(text):
    # type: (str) -> str
    """csh/tcsh: as sh, and ``\\!`` (history substitution); a line break cannot be written."""
    if "\n" in text or "\r" in text:
        raise Refused("csh cannot hold a line break")
    return sh_quote(text).replace("!", "\\!")


def fish_quote(text):
    # type: (str) -> str
    """fish: single quotes, in which backslash and the quote take a backslash."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def powershell_expr(text):
    # type: (str) -> str
    """ASCII only (native output is read in the console's code page): printable ASCII runs in
    single quotes (quote doubled), every other UTF-16 unit ``[char]0xHHHH``, joined by ``+``."""
    tokens, run = [], ""  # type: list[str], str
    for unit in _utf16(text):
        if 0x20 <= unit <= 0x7E:
            run += "''" if unit == 0x27 else chr(unit)
            continue
        if run or not tokens:
            tokens.append("'" + run + "'")
        tokens.append(f"[char]0x{unit:04X}")
        run = ""
    return " + ".join([*tokens, "'" + run + "'"] if run or not tokens else tokens)


def _csh_setenv(name, value):
    # type: (str, str) -> str
    try:
        return "setenv " + name + " " + csh_quote(value)
    except Refused as err:
        raise Refused(str(err) + " (in " + name + ")") from None


# (line that unsets NAME, line that sets NAME to VALUE); PowerShell has no empty variables
FORMS = {
    "sh": ("unset {}", lambda n, v: "export " + n + "=" + sh_quote(v)),
    "csh": ("unsetenv {}", _csh_setenv),
    "fish": ("set -e {}", lambda n, v: "set -gx " + n + " " + fish_quote(_text(n, v, "fish"))),
    "powershell": ("$Env:{} = $null", lambda n, v: "$Env:" + n + " = " + powershell_expr(v)),
}  # type: Dict[str, tuple[str, Callable[[str, str], str]]]


def emit(shell, changes, env):
    # type: (str, Changes, dict[str, str]) -> str
    unset, assign = FORMS[shell]
    lines = []
    for name, value in sorted(changes.items()):
        if not valid_name(name):
            raise Refused("the variable name " + repr(name) + " cannot be written for a shell")
        if value is None or (not value and shell == "powershell"):
            lines.append(unset.format(name) if name in env else "")
        else:
            lines.append(assign(name, value))
    return "".join(line + "\n" for line in lines if line)


def emit_xonsh(changes, env):
    # type: (Changes, dict[str, str]) -> str
    """One JSON object {name: value or null}; the .xsh stub applies it to ``${...}``."""
    emit("sh", changes, env)  # the same names are refused
    kept = {k: v and _text(k, v, "xonsh") for k, v in changes.items() if v is not None or k in env}
    return _dump(kept) + "\n"


def _emitter(shell):
    # type: (str) -> Callable[[Changes, dict[str, str]], str]
    return lambda changes, env: emit(shell, changes, env)


EMITTERS = {shell: _emitter(shell) for shell in FORMS}
EMITTERS["xonsh"] = emit_xonsh
emit_powershell = EMITTERS["powershell"]
CMD_MAX_LINE = 8191  # cmd's limit on one line of a batch file


def emit_cmd(changes, env, delayed=False):
    # type: (Changes, dict[str, str], bool) -> str
    """A pure-ASCII .bat (cmd reads it in the OEM code page) of ``@set NAME=VALUE`` lines, no
    quotes around them (wine's cmd reads ``set "..."`` differently): carets before ``^&|<>()"``,
    ``%%``. Characters outside ASCII are copied as ``%NAME:~OFFSET,LENGTH%`` substrings of
    variables that hold them now into the helper ``_EFY_U`` and taken from there. Refused: a
    control character, ``!`` under delayed expansion, a line over 8191 characters, a character
    no variable holds."""
    helper, at = [], {}  # type: list[str], dict[str, int]

    def ref(own, text):
        # type: (str, str) -> str
        if text not in at:
            for name in [own, *sorted(env)]:
                found = env.get(name, "").find(text) if valid_name(name) else -1
                if found >= 0:
                    at[text] = sum(len(_utf16(t)) for t in helper[1::2])
                    where = "%" + name + ":~" + str(len(_utf16(env[name][:found])))
                    helper.extend([where + "," + str(len(_utf16(text))) + "%", text])
                    break
            else:
                if len(text) > 1:  # no variable holds the whole run: one character at a time
                    return "".join(ref(own, c) for c in text)
                why = f" would hold the character U+{ord(text):04X}, which no variable of the "
                raise Refused(own + why + "environment holds to copy it from")
        return "%_EFY_U:~" + str(at[text]) + "," + str(len(_utf16(text))) + "%"

    emit("sh", changes, env)  # the same names are refused
    lines = []
    for name, value in sorted(changes.items()):
        if not value:  # cmd has no empty variables
            lines.extend(["@set " + name + "="] if name in env else [])
            continue
        out = ["@set " + name + "="]
        for run in _runs(_text(name, value, "cmd")):
            if ord(run[0]) > 126:
                out.append(ref(name, run))
                continue
            for c in run:
                if c < " " and c != "\t":
                    why = f" would hold the control character U+{ord(c):04X}, which cmd cannot "
                    raise Refused(name + why + "read back from a batch file")
                if c == "!" and delayed:
                    raise Refused(name + ' would hold a "!" and delayed expansion is on')
                out.append("%%" if c == "%" else "^" + c if c in '^&|<>()"' else c)
        lines.append("".join(out))
    if helper:
        lines = ["@set _EFY_U=" + "".join(helper[0::2]), *lines, "@set _EFY_U="]
    for line in lines:
        if len(line) > CMD_MAX_LINE:
            why = f"a line of the .bat would be {len(line)} characters, over cmd's limit of "
            raise Refused(why + str(CMD_MAX_LINE))
    return "".join(line + "\r\n" for line in lines)


def _runs(value):
    # type: (str) -> list[str]
    """``value`` cut into runs of ASCII and of non-ASCII characters."""
    runs = []  # type: list[str]
    for c in value:
        if runs and (ord(runs[-1][0]) > 126) == (ord(c) > 126):
            runs[-1] += c
        else:
            runs.append(c)
    return runs


# --- the command line the stubs run --------------------------------------------------------


def read_plan(combo):
    # type: (str) -> Plan
    if not combo or not all(c in _REST + ".-" for c in combo) or combo[0] in "._-":
        raise Refused("bad combo name " + repr(combo))
    here = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120 - no pathlib import
    plan_file = os.path.join(here, "envfactory-" + combo + ".json")  # noqa: PTH118
    with open(plan_file, encoding="utf-8") as f:  # noqa: PTH123
        plan = _load(f.read(), plan_file)
    if not isinstance(plan, dict) or plan.get("format") != 1:
        raise Refused("the plan of " + combo + " is not envfactory's (format 1)")
    return plan


def environment(plan):
    # type: (Plan) -> dict[str, str]
    if plan["os"] == "windows":  # names are case-insensitive there; Python gives them upper
        return {k.upper(): v for k, v in os.environ.items()}
    return dict(os.environ)


def run(argv, env=None, is_dir=os.path.isdir):
    # type: (list[str], dict[str, str] | None, IsDir) -> tuple[int, bytes, str]
    """(exit status, output, message) for ``argv``: OP SHELL COMBO [cmd: OUT.bat 0|1]."""
    if len(argv) < 3 or argv[0] not in ("activate", "deactivate") or argv[1] not in SHELLS:
        return 2, b"", "usage: activation.py activate|deactivate SHELL COMBO [OUT.bat 0|1]"
    op, shell, combo = argv[:3]
    if shell == "cmd" and len(argv) != 5:
        return 2, b"", "usage: activation.py OP cmd COMBO OUT.bat 0|1"
    try:
        plan = read_plan(combo)
        env = environment(plan) if env is None else env
        changes = activate(env, plan, is_dir) if op == "activate" else deactivate(env, plan)
        if shell == "cmd":
            return 0, emit_cmd(changes, env, delayed=argv[4] == "1").encode("ascii"), ""
        text = EMITTERS[shell](changes, env)
        ascii_only = shell in ("xonsh", "powershell")
        return 0, text.encode("ascii") if ascii_only else os.fsencode(text), ""
    except Refused as err:
        return 1, b"", f"envfactory ({combo}): {op} refused: {err}; nothing was changed"
    except Exception as err:  # the environment stays as it is, whatever went wrong
        why = f"{type(err).__name__}: {err}"
        return 1, b"", f"envfactory ({combo}): {op} failed ({why}); nothing was changed"


def main(argv):
    # type: (list[str]) -> int
    """Run by the stubs through an import, so the compiled module is cached in __pycache__."""
    status, output, message = run(argv)
    if message:
        sys.stderr.write(message + "\n")
    if argv[1:2] == ["cmd"] and len(argv) == 5:
        # empty when refused: no file at all tells the .bat stub that python.exe itself failed
        with open(argv[3], "wb") as f:  # noqa: PTH123
            f.write(output)
    elif status == 0:
        sys.stdout.buffer.write(output)
        sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
