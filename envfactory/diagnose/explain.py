"""Recognize known TensorFlow/CUDA problems in a pasted log: id, matching lines, cause, fix.

The patterns are data (``data/explain-patterns.yaml``); this module loads and applies them. A log
is read as a stream of lines in one pass, each line (or each 2048-character window of a longer
one) tried only against the problems whose keywords it contains, with patterns that the loader
checks are free of unbounded ``.*``: the work is linear in the size of the log and the memory is
bounded by what is kept per problem (at most ten lines each).
"""

from __future__ import annotations

import codecs
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from envfactory.compiled import DATA_DIR, CompiledData
from envfactory.diagnose.finding import Severity, count_problems
from envfactory.errors import CatalogError, UserInputError
from envfactory.untrusted import terminal_text

if TYPE_CHECKING:
    from envfactory.yamlio import YamlMap

MAX_LINES_PER_PROBLEM = 10
WINDOW = 2048
"""Longest piece of a line a pattern sees; a longer line is tried in overlapping windows."""
OVERLAP = 256
READ_CHUNK = 1 << 16


_UNBOUNDED = re.compile(r"(?<!\\)\.[*+]")
# Logs quote file names and messages with whatever the user's editor, forum or terminal made of
# the quote (double quotes, backticks, typographic single and double quotes, as in nvidia-smi's
# message pasted with U+2018 for its apostrophe): every quote and apostrophe is read as an ASCII
# apostrophe, so a pattern writes ' for any of them. One character for one, so offsets and
# windows are unchanged; the lines shown stay as written. Plain-ASCII lines without " or ` (most
# lines) skip the translation.
QUOTES = str.maketrans(
    dict.fromkeys('"`\u00b4\u2018\u2019\u201a\u201b\u2032\u201c\u201d\u201e\u201f\u2033', "'")
)
_CPU_ONLY_NOTE = (
    "Nothing in this log shows an NVIDIA GPU: on a machine without one this message is expected "
    "and TensorFlow runs on the CPU. If this machine has an NVIDIA GPU: "
)


_HEADING = re.compile(r"#{2,4}\s{1,3}([\w .-]{1,60}?)\s{0,3}$")
"""a Markdown heading of an issue template, whose answer is the next non-empty line"""


class Regex:
    """A pattern of the table, compiled (case-insensitive) the first time it is searched: a
    log reaches the patterns of a few rules only (their keywords gate them), and compiling all
    of them took ~25 ms of every explain. Pickled as its text (``explain-patterns.pickle``)."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str, compiled: re.Pattern[str] | None = None) -> None:
        self.pattern = pattern
        self._compiled = compiled

    def search(self, text: str) -> re.Match[str] | None:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self.pattern, re.IGNORECASE)
        return compiled.search(text)

    def __reduce__(self) -> tuple[type[Regex], tuple[str]]:
        return (Regex, (self.pattern,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Regex) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"


@dataclass(frozen=True)
class Pattern:
    id: str
    keywords: tuple[str, ...]
    regexes: tuple[Regex, ...]
    weak_regexes: tuple[Regex, ...]
    weak_when: Regex | None
    weak_unless: tuple[str, ...]
    """names of the evidence sets any one of which makes a weak hit a problem"""
    suppressed_by: tuple[str, ...]
    unless_keywords: tuple[str, ...]
    unless_log_has: tuple[Regex, ...]
    requires: tuple[str, ...]
    """evidence sets and problem ids every one of which the log must show for a hit to count"""
    cause: str
    fix: str
    detail: str | None


@dataclass(frozen=True)
class Evidence:
    """Lines that show something about the machine (a GPU is present, CUDA was set up)."""

    name: str
    keywords: tuple[str, ...]
    patterns: tuple[Regex, ...]


@dataclass(frozen=True)
class Table:
    """The loaded pattern file: problems plus the evidence sets their weak hits depend on."""

    problems: tuple[Pattern, ...]
    evidence: tuple[Evidence, ...]

    @functools.cached_property
    def any_keyword(self) -> re.Pattern[str]:
        """One pass over a line tells whether any rule could apply (most lines: none)."""
        words = {k for ev in self.evidence for k in ev.keywords}
        for rule in self.problems:
            words.update(rule.keywords)
            words.update(rule.unless_keywords)
        return re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))


@dataclass(frozen=True)
class Problem:
    id: str
    lines: tuple[str, ...]
    line_numbers: tuple[int, ...]
    cause: str
    fix: str
    severity: Severity = "problem"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "lines": list(self.lines),
            "cause": self.cause,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Explanation:
    problems: tuple[Problem, ...]

    @property
    def has_problems(self) -> bool:
        """True when at least one finding is a problem (not only notes)."""
        return count_problems(self.problems) > 0

    def to_json(self) -> dict[str, Any]:
        """``{"problems": [{"id", "severity", "lines", "cause", "fix"}]}``: findings in the order
        their first line appears in the log, ``lines`` (at most 10, stripped) in log order;
        ``severity`` is ``problem`` or ``note`` (expected on a machine without a GPU)."""
        return {"problems": [p.to_json() for p in self.problems]}


def _compile(raw: object, where: str) -> Regex:
    text = str(raw)
    if _UNBOUNDED.search(text):
        raise CatalogError(
            f"{where}: pattern {text!r} uses an unbounded '.*' or '.+'",
            "use a bounded repeat such as .{0,80}; explain must stay linear in the log size",
        )
    try:
        return Regex(text, re.compile(text, re.IGNORECASE))
    except re.error as exc:
        raise CatalogError(f"{where}: bad pattern {text!r}: {exc}") from None


def _seq(node: YamlMap, key: str, where: str) -> list[object]:
    value = node.get(key, [])
    if not isinstance(value, list):
        raise CatalogError(f"{where}: '{key}' must be a list")
    return list(value)


_KEYS = {
    "id", "keywords", "patterns", "weak_patterns", "weak_when", "weak_unless", "suppressed_by",
    "unless_keywords", "unless_log_has", "requires", "cause", "fix", "detail",
}  # fmt: skip
_REQUIRED = {"id", "keywords", "patterns", "cause", "fix"}


def _problem(node: object, path: str) -> Pattern:
    from envfactory.yamlio import YamlMap

    line = node.line if isinstance(node, YamlMap) else "?"
    where = f"{path}:{line}"
    if not isinstance(node, YamlMap):
        raise CatalogError(f"{where}: each problem must be a mapping")
    keys = set(node)
    if not _REQUIRED <= keys <= _KEYS:
        raise CatalogError(
            f"{where}: a problem has {', '.join(sorted(_REQUIRED))} and optionally "
            f"{', '.join(sorted(_KEYS - _REQUIRED))}; got {', '.join(sorted(map(str, keys)))}"
        )
    pid = str(node["id"])
    keywords = tuple(str(k).lower() for k in _seq(node, "keywords", where))
    if not keywords:
        raise CatalogError(f"{where}: '{pid}' needs at least one keyword")
    weak_when = node.get("weak_when")
    detail = node.get("detail")
    return Pattern(
        id=pid,
        keywords=keywords,
        regexes=tuple(_compile(p, where) for p in _seq(node, "patterns", where)),
        weak_regexes=tuple(_compile(p, where) for p in _seq(node, "weak_patterns", where)),
        weak_when=_compile(weak_when, where) if weak_when else None,
        weak_unless=tuple(str(s) for s in _seq(node, "weak_unless", where)) or ("gpu",),
        suppressed_by=tuple(str(s) for s in _seq(node, "suppressed_by", where)),
        unless_keywords=tuple(str(k).lower() for k in _seq(node, "unless_keywords", where)),
        unless_log_has=tuple(_compile(p, where) for p in _seq(node, "unless_log_has", where)),
        requires=tuple(str(s) for s in _seq(node, "requires", where)),
        cause=str(node["cause"]),
        fix=str(node["fix"]),
        detail=str(detail) if detail else None,
    )


def _load(text: str, path: str) -> Table:
    # libyaml with line numbers (yamlio), as the catalog (ruamel's pure-Python round-trip
    # parser took ~60 ms), imported only when the file differs from its compiled form
    from envfactory.yamlio import YamlMap, YamlSeq, load_yaml

    doc = load_yaml(path, text)
    if not isinstance(doc, YamlMap) or not isinstance(doc.get("problems"), YamlSeq):
        raise CatalogError(f"{path}: top level must be 'problems:' with a list")
    out: list[Pattern] = []
    seen: set[str] = set()
    for node in doc["problems"]:
        rule = _problem(node, path)
        if rule.id in seen:
            raise CatalogError(f"{path}: duplicate problem id '{rule.id}'")
        seen.add(rule.id)
        out.append(rule)
    evidence = _evidence(doc.get("evidence") or YamlMap(doc.line), path)
    names = {ev.name for ev in evidence} | {"gpu"}
    for rule in out:
        unknown = set(rule.suppressed_by) - seen
        if unknown:
            raise CatalogError(f"{path}: '{rule.id}' is suppressed by unknown ids {unknown}")
        unknown = set(rule.weak_unless) - names
        if unknown:
            raise CatalogError(f"{path}: '{rule.id}' names unknown evidence {unknown}")
        unknown = set(rule.requires) - names - seen
        if unknown:
            raise CatalogError(f"{path}: '{rule.id}' requires unknown evidence or ids {unknown}")
    return Table(problems=tuple(out), evidence=evidence)


def _evidence(node: object, path: str) -> tuple[Evidence, ...]:
    from envfactory.yamlio import YamlMap

    if not isinstance(node, YamlMap):
        raise CatalogError(f"{path}: 'evidence' must map names to keywords and patterns")
    out = []
    for name, body in node.items():
        where = f"{path}: evidence '{name}'"
        if not isinstance(body, YamlMap) or set(body) != {"keywords", "patterns"}:
            raise CatalogError(f"{where} must have exactly 'keywords' and 'patterns'")
        out.append(
            Evidence(
                name=str(name),
                keywords=tuple(str(k).lower() for k in _seq(body, "keywords", where)),
                patterns=tuple(_compile(p, where) for p in _seq(body, "patterns", where)),
            )
        )
    return tuple(out)


DATA_FILE = "explain-patterns.yaml"
COMPILED = DATA_DIR / "explain-patterns.pickle"
RECORDS: tuple[type, ...] = (Table, Pattern, Evidence)


def _load_yaml(texts: Mapping[str, bytes]) -> Table:
    return _load(texts[DATA_FILE].decode("utf-8"), DATA_FILE)


DATA = CompiledData(COMPILED, (DATA_DIR / DATA_FILE,), RECORDS, Table, _load_yaml)


@functools.cache
def table() -> Table:
    """The shipped patterns, loaded once: the compiled table (``envfactory/compiled.py``)
    while it was made from this very file, else the YAML (every pattern checked)."""
    return DATA.load()


def patterns() -> tuple[Pattern, ...]:
    """The shipped problem patterns."""
    return table().problems


@dataclass
class _Hits:
    lines: list[tuple[int, str]] = field(default_factory=list)
    strong: bool = False
    groups: dict[str, str] | None = None


def _windows(line: str) -> Iterator[str]:
    if len(line) <= WINDOW:
        yield line
        return
    step = WINDOW - OVERLAP
    for start in range(0, len(line) - OVERLAP, step):
        yield line[start : start + WINDOW]


def _first(regexes: Sequence[Regex], text: str) -> re.Match[str] | None:
    for regex in regexes:
        match = regex.search(text)
        if match:
            return match
    return None


def explain_lines(lines: Iterable[str], rules: Table | None = None) -> Explanation:
    """Every recognized problem in a log given as lines; one pass, bounded memory."""
    tbl = table() if rules is None else rules
    hits: dict[str, _Hits] = {}
    flags: set[tuple[str, str]] = set()  # (problem id, "when" | "unless")
    seen: set[str] = set()  # names of the evidence sets found
    heading: str | None = None
    for number, raw in enumerate(lines, start=1):
        pieces = list(_windows(raw))
        if heading is not None and raw.strip() and len(pieces) == 1:
            # An issue template's answer ('### TensorFlow version' then '2.12.0') is also read
            # as one line, 'TensorFlow version: 2.12.0'; lines shown stay as written.
            pieces.append(f"{heading}: {raw.strip()}")
        if raw.strip():
            title = _HEADING.match(raw.strip())
            heading = title.group(1) if title else None
        for piece in pieces:
            # a log's escape sequences and control characters are never echoed to a terminal
            # (OSC 52 writes the clipboard, CR overwrites the line), nor matched
            shown = terminal_text(piece).strip()
            if not shown:
                continue
            text = shown
            if not text.isascii() or '"' in text or "`" in text:
                text = text.translate(QUOTES)
            low = text.lower()
            if not tbl.any_keyword.search(low):
                continue
            for ev in tbl.evidence:
                if (
                    ev.name not in seen
                    and any(k in low for k in ev.keywords)
                    and _first(ev.patterns, text)
                ):
                    seen.add(ev.name)
            for rule in tbl.problems:
                if (
                    rule.unless_log_has
                    and any(k in low for k in rule.unless_keywords)
                    and _first(rule.unless_log_has, text)
                ):
                    flags.add((rule.id, "unless"))
                if not any(k in low for k in rule.keywords):
                    continue
                if rule.weak_when is not None and rule.weak_when.search(text):
                    flags.add((rule.id, "when"))
                match = _first(rule.regexes, text)
                strong = match is not None
                if match is None:
                    match = _first(rule.weak_regexes, text)
                if match is None:
                    continue
                found = hits.setdefault(rule.id, _Hits())
                found.strong = found.strong or strong
                if found.groups is None:
                    found.groups = {k: v for k, v in match.groupdict().items() if v}
                if len(found.lines) < MAX_LINES_PER_PROBLEM and (
                    not found.lines or found.lines[-1][0] != number
                ):
                    found.lines.append((number, shown))
    by_id = {rule.id: rule for rule in tbl.problems}
    # a hit counts only where the log also shows everything its problem requires
    active = {
        pid: found
        for pid, found in hits.items()
        if all(r in seen or (r in hits and (r, "unless") not in flags) for r in by_id[pid].requires)
    }
    problems: list[Problem] = []
    for pid, found in active.items():
        rule = by_id[pid]
        if (pid, "unless") in flags or any(s in active for s in rule.suppressed_by):
            continue
        weak_only = not found.strong and not seen.intersection(rule.weak_unless)
        if weak_only and rule.weak_when is not None and (pid, "when") not in flags:
            weak_only = False
        cause = _cause(rule, found.groups or {})
        problems.append(
            Problem(
                id=pid,
                lines=tuple(text for _, text in found.lines),
                line_numbers=tuple(n for n, _ in found.lines),
                cause=_CPU_ONLY_NOTE + cause if weak_only else cause,
                fix=rule.fix,
                severity="note" if weak_only else "problem",
            )
        )
    problems.sort(key=lambda p: (p.line_numbers[0], p.id))
    return Explanation(tuple(problems))


def _cause(pattern: Pattern, groups: dict[str, str]) -> str:
    if pattern.detail is None:
        return pattern.cause
    try:
        return f"{pattern.cause} {pattern.detail.format(**groups)}"
    except (KeyError, IndexError):
        return pattern.cause


def explain(log: str, rules: Table | None = None) -> Explanation:
    """Every recognized problem in ``log``; an empty result for a healthy log."""
    return explain_lines(log.splitlines(), rules)


def read_lines(stream: IO[bytes], encoding: str, name: str) -> Iterator[str]:
    """Decode a byte stream incrementally into lines (bounded memory for any log size).

    A UTF-16/UTF-8 byte-order mark wins over ``encoding``. Bytes that are not valid in the
    encoding raise :class:`UserInputError` naming the offset, with a hint.
    """
    # read1: one read of the underlying file per chunk, so a terminal's Ctrl-D (one empty read,
    # not a lasting end of file) ends the input at the first press, not the second
    read: Callable[[int], bytes] = getattr(stream, "read1", stream.read)
    head = read(READ_CHUNK)
    for bom, codec in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if head.startswith(bom):
            encoding = codec
            break
    try:
        decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    except LookupError:
        raise UserInputError(
            f"unknown encoding '{encoding}'", "use a Python codec name such as utf-8, cp1252, gbk"
        ) from None
    offset = 0
    pending = ""
    chunk = head
    while True:
        final = not chunk
        try:
            text = decoder.decode(chunk, final=final)
        except UnicodeDecodeError as exc:
            raise UserInputError(
                f"{name} is not valid {encoding}: byte 0x{exc.object[exc.start]:02x} at offset "
                f"{offset + exc.start}",
                "pass --encoding with the log's encoding (a Windows console is often cp1252, "
                "cp437 or gbk), or convert it first, e.g. 'iconv -f cp1252 -t utf-8 LOG'",
            ) from None
        offset += len(chunk)
        pending += text
        parts = pending.split("\n")
        pending = parts.pop()
        for part in parts:
            yield part.rstrip("\r")
        if len(pending) > 4 * WINDOW:
            # A line with no newline in sight: hand over the windows already complete.
            cut = len(pending) - OVERLAP
            yield pending[:cut]
            pending = pending[cut:]
        if final:
            break
        chunk = read(READ_CHUNK)
    if pending:
        yield pending.rstrip("\r")
