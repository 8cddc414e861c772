"""YAML adapter: ruamel's round-trip parser, whose nodes know their line numbers, and one
validating reader over them, so every data file (catalog, project manifest) reports a bad key
or value as ``file:line`` with a hint.

Every YAML text a user or a pull request can hand us (envfactory.yaml, conda-lock.yml,
virtual-packages.yml) first goes through ``check_bounds``: the parser's event stream (iterative
in both ruamel and PyYAML, unlike their recursive composers) is walked once, counting how many
nodes the document would have with every alias expanded, and how deep it nests. A 1 KB
"billion laughs" block (nine anchors, each aliasing the previous one nine times) expands to 10**9
nodes; a loader would build it by reference in milliseconds and the first consumer that walks it
(pydantic, our readers) would run for minutes and gigabytes. Deep nesting overflows the
composers' recursion (RecursionError). Both are refused before any loader runs.
"""

from __future__ import annotations

import codecs
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from envfactory.errors import CatalogError, EnvfactoryError, UserInputError, nearest

# No file envfactory reads nests deeper than ~8 (conda-lock.yml: 5); 64 leaves room and stays far
# below Python's recursion limit in ruamel's and PyYAML's composers and in pydantic.
MAX_DEPTH = 64
# Nodes that aliases may add beyond the ones written out. conda-lock's writer and the catalog use
# no aliases at all; a hand-written manifest might reuse a list or two.
MAX_ALIAS_NODES = 10_000


class YamlReader:
    """Reads one YAML file's round-trip nodes, rejecting unknown keys and wrong types with
    ``file:line``. ``hint`` is the fix suggested when nothing more precise is known."""

    def __init__(self, path: str, hint: str = "fix the catalog data file") -> None:
        self.path = path
        self.hint = hint

    def fail(self, node: Any, message: str, hint: str | None = None) -> CatalogError:
        line = line_of(node)
        where = f"{self.path}:{line}" if line else self.path
        return CatalogError(f"{where}: {message}", hint or self.hint)

    def mapping(
        self,
        node: Any,
        what: str,
        required: set[str],
        optional: set[str] = frozenset(),  # type: ignore[assignment]
    ) -> CommentedMap:
        if not isinstance(node, CommentedMap):
            raise self.fail(node, f"{what} must be a mapping, got {type(node).__name__}")
        allowed = required | optional
        for key in node:
            if key not in allowed:
                line = node.lc.key(key)[0] + 1
                close = nearest(str(key), allowed, n=1)
                guess = f"did you mean '{close[0]}'? " if close else ""
                raise CatalogError(
                    f"{self.path}:{line}: unknown key '{key}' in {what}",
                    f"{guess}allowed keys: {', '.join(sorted(allowed))}",
                )
        missing = sorted(required - set(node))
        if missing:
            raise self.fail(node, f"{what} lacks required key(s): {', '.join(missing)}")
        return node

    def string(self, parent: CommentedMap, key: str, what: str) -> str:
        value = parent[key]
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self._type(parent, key, what, "a string")
        if isinstance(value, float):
            # YAML reads 10.0 as a float; versions must be quoted to keep "10.0" != "10".
            raise self._type(parent, key, what, "a quoted string (write '10.0', not 10.0)")
        return str(value)

    def opt_string(self, parent: CommentedMap, key: str, what: str) -> str | None:
        return self.string(parent, key, what) if parent.get(key) is not None else None

    def boolean(self, parent: CommentedMap, key: str, what: str) -> bool:
        value = parent[key]
        if not isinstance(value, bool):
            raise self._type(parent, key, what, "true or false")
        return value

    def integer(self, parent: CommentedMap, key: str, what: str) -> int:
        value = parent[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._type(parent, key, what, "an integer")
        return value

    def strings(self, parent: CommentedMap, key: str, what: str) -> tuple[str, ...]:
        value = parent[key]
        if not isinstance(value, CommentedSeq) or not all(
            isinstance(v, str) and not isinstance(v, bool) for v in value
        ):
            raise self._type(parent, key, what, "a list of quoted strings")
        return tuple(str(v) for v in value)

    def sequence(self, parent: CommentedMap, key: str, what: str) -> CommentedSeq:
        value = parent[key]
        if not isinstance(value, CommentedSeq):
            raise self._type(parent, key, what, "a list")
        return value

    def _type(self, parent: CommentedMap, key: str, what: str, expected: str) -> CatalogError:
        line = parent.lc.key(key)[0] + 1
        got = type(parent[key]).__name__
        return CatalogError(
            f"{self.path}:{line}: '{key}' in {what} must be {expected}, got {got}",
            self.hint,
        )


def line_of(node: Any) -> int | None:
    lc = getattr(node, "lc", None)
    return lc.line + 1 if lc is not None and lc.line is not None else None


def load_yaml(name: str, text: str, hint: str = "fix the catalog data file") -> Any:
    check_bounds(text, name, "ruamel", CatalogError)
    try:
        with warnings.catch_warnings():
            # ruamel warns (ReusedAnchorWarning) where the input is ambiguous: refuse instead.
            warnings.simplefilter("error")
            return YAML(typ="rt").load(text)
    except Warning as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
        raise CatalogError(f"{where}: not valid YAML here: {problem}", hint) from None
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        raise CatalogError(f"{where}: not valid YAML: {exc}", hint) from None
    except (TypeError, ValueError) as exc:
        # ruamel's constructor on keys it cannot hash (``? {a: 1}``) or values it cannot
        # build (found by tests/test_fuzz_readers.py).
        raise CatalogError(f"{name}: not valid YAML here: {exc}", hint) from None


def check_bounds(
    text: str,
    name: str,
    parser: Literal["ruamel", "pyyaml"] = "ruamel",
    error: type[EnvfactoryError] = UserInputError,
) -> None:
    """Refuse ``text`` if its aliases would expand beyond ``MAX_ALIAS_NODES`` extra nodes or it
    nests deeper than ``MAX_DEPTH``. Syntax errors are left to the loader, which reports them
    with a line. ``parser`` is the library that will load the text (their grammars differ at
    the edges, so the check reads the text the way the loader will)."""
    hint = (
        "this file is not one envfactory or conda-lock writes; regenerate it "
        "(a YAML file with deep nesting or alias bombs is refused, see docs/security.md)"
    )
    if parser == "pyyaml":
        import yaml  # type: ignore[import-untyped,unused-ignore]

        # libyaml's parser first (a 290 KB lock: 0.09 s, against 1.3 s in Python). It scans a
        # whole flow collection before its first event and stops at its own nesting limit
        # (1000) with a syntax error; then the pure-Python parser, which streams, says why.
        for loader in (getattr(yaml, "CSafeLoader", None), yaml.SafeLoader):
            if loader is None:
                continue
            try:
                _walk(yaml.parse(text, Loader=loader), name, hint, error)
                return
            except yaml.YAMLError:
                continue
        return  # the loader reports the syntax error, with its line
    try:
        _walk(YAML(typ="rt").parse(text), name, hint, error)
    except YAMLError:
        return  # the loader reports the syntax error, with its line


def _walk(events: Iterable[Any], name: str, hint: str, error: type[EnvfactoryError]) -> None:
    sizes: dict[str, int] = {}  # anchor -> expanded node count of the node it marks
    stack: list[list[Any]] = []  # [anchor, expanded size so far] per open collection
    extra = 0
    for event in events:
        kind = type(event).__name__
        if kind in ("MappingStartEvent", "SequenceStartEvent"):
            stack.append([event.anchor, 1])
            if len(stack) > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise error(f"{name}:{line}: YAML nests deeper than {MAX_DEPTH} levels", hint)
            continue
        if kind in ("MappingEndEvent", "SequenceEndEvent"):
            anchor, size = stack.pop()
        elif kind == "ScalarEvent":
            anchor, size = event.anchor, 1
        elif kind == "AliasEvent":
            anchor, size = None, sizes.get(event.anchor, 1)
            extra += size
            if extra > MAX_ALIAS_NODES:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise error(
                    f"{name}:{line}: YAML aliases expand to more than {MAX_ALIAS_NODES} nodes "
                    "(an alias bomb)",
                    hint,
                )
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        if stack:
            stack[-1][1] += size


def read_text(path: Path, what: str, hint: str) -> str:
    """A data file a user or a pull request gave us, as text: UTF-8 (a UTF-8 byte-order mark is
    allowed); anything else is refused with the byte offset, never guessed at."""
    data = path.read_bytes()
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE)):
        raise UserInputError(
            f"{path}: {what} is UTF-16 or UTF-32 (it starts with a byte-order mark)",
            f"save it as UTF-8; {hint}",
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserInputError(
            f"{path}:{line}: {what} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start})",
            f"save it as UTF-8; {hint}",
        ) from None
