"""YAML adapter: every YAML file envfactory reads goes through here, with one typing rule and
the same bounds. libyaml's composer (through PyYAML), whose nodes carry their line numbers, turned
into plain dicts and lists that remember those lines, and one validating reader over them, so
every data file (catalog, project manifest) reports a bad key or value as ``file:line`` with a
hint; ``load_plain`` builds plain dicts and lists for large documents read whole (a lock).

Why libyaml and not ruamel's round-trip parser: the catalog (~100 KB of YAML) is read by every
command; ruamel's pure-Python parser took 210-250 ms for it, libyaml composes it in ~8 ms
(benchmarks/bench_catalog.py measures both in one run).

The typing rule: an untagged plain scalar is null, a bool, an int or a float only where YAML 1.1
(PyYAML: conda-lock's writer and reader) and YAML 1.2's core schema (ruamel: conda's ``.condarc``
reader) both read it so, with the same value; every other plain scalar is its text. So
``yes``/``no``/``on``/``off`` stay strings (1.1 says bool), and so do ``010`` (1.1: 8, 1.2: 10),
``0o17``, ``1e3``, ``-.5`` (1.1: strings, 1.2: numbers), ``1_000`` and ``2021-01-01`` (1.1: an int
and a date, 1.2: strings). What either library writes reads back as the value it wrote: each
quotes a string its own version would read as another type, so a plain scalar it writes is one
both versions agree on or a string to both (tests/test_yamlio.py checks both writers).

Bounded: aliases may expand at most ``MAX_ALIAS_NODES`` nodes in all (a "billion laughs" block
fails as it starts to grow instead of filling memory), nesting is refused beyond ``MAX_DEPTH``
collections, and a key given twice is refused, each with file:line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any, cast

import yaml
from yaml.composer import Composer
from yaml.events import (
    CollectionEndEvent,
    CollectionStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from envfactory.errors import CatalogError, EnvfactoryError, UserInputError, nearest

try:  # libyaml: what makes the catalog load in milliseconds
    from yaml import CBaseLoader as _BaseLoader

    LIBYAML = True
except ImportError:  # pragma: no cover - a PyYAML built without libyaml: same nodes, slower
    from yaml import BaseLoader as _BaseLoader  # type: ignore[assignment]

    LIBYAML = False

# No file envfactory reads nests deeper than ~8 (conda-lock.yml: 5); 64 leaves room and stays far
# below Python's recursion limit here, in ruamel's and PyYAML's composers and in pydantic.
MAX_DEPTH = 64
# Nodes that aliases may add beyond the ones written out. conda-lock's writer and the catalog use
# no aliases at all; a hand-written manifest might reuse a list or two.
MAX_ALIAS_NODES = 10_000
LIMIT_HINT = (
    "this file is not one envfactory or conda-lock writes; regenerate it "
    "(a YAML file with deep nesting or alias bombs is refused, see docs/security.md)"
)

_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"

# Where YAML 1.1 (https://yaml.org/type/) and the YAML 1.2 core schema
# (https://yaml.org/spec/1.2.2/#1032-tag-resolution) read a plain scalar the same way.
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})
# A leading zero makes an octal number in 1.1: 010 is 8 there, 10 in 1.2; 07 is 7 in both.
_INT_RE = re.compile(r"[-+]?(?:0|[1-9][0-9]*|0+[0-7])\Z")
_HEX_RE = re.compile(r"0x[0-9a-fA-F]+\Z")
# 1.1 wants a dot, and a sign on an exponent; 1.2 allows a sign before a leading dot (-.5).
_FLOAT_RE = re.compile(r"(?:[-+]?[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+][0-9]+)?\Z")
_INF_RE = re.compile(r"[-+]?\.(?:inf|Inf|INF)\Z")
_NAN_RE = re.compile(r"\.(?:nan|NaN|NAN)\Z")
# What an explicit !!int / !!float tag accepts (the 1.2 core forms).
_TAGGED_INT_RE = re.compile(r"[-+]?[0-9]+\Z")
_TAGGED_FLOAT_RE = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z")


_PLAIN = "tag:envfactory,2026:plain"  # an untagged plain scalar, typed later by ``_scalar``


class _Composer(_BaseLoader):
    """libyaml's parser and composer. Untagged plain scalars get the ``_PLAIN`` tag (typed by
    the module's typing rule in ``_scalar``); quoted ones and ``!!str`` stay strings."""

    def resolve(self, kind: type[Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode:
            return _PLAIN if implicit[0] else _STR
        return _SEQ if kind is SequenceNode else _MAP


class _PartialComposer(_Composer, Composer):
    """Composes only some values of the top-level mapping, from libyaml's events, skipping the
    others event by event: ``lock --check`` reads a lock's ``metadata`` block and stops before
    its ``package`` list, which is most of the file."""

    def __init__(self, text: str) -> None:
        _Composer.__init__(self, text)
        Composer.__init__(self)
        self.skipped_anchors = False

    def top_level(self, wanted: frozenset[str]) -> tuple[int, list[tuple[Node, Node]]] | None:
        """The line the top-level mapping starts on and the ``(key, value)`` nodes of the wanted
        keys, in file order, up to the last one wanted; None for an empty or non-mapping
        document."""
        self.get_event()  # StreamStart
        if self.check_event(StreamEndEvent):
            return None
        self.get_event()  # DocumentStart
        if not self.check_event(MappingStartEvent):
            return None
        start = cast(MappingStartEvent, self.get_event())
        found: list[tuple[Node, Node]] = []
        left = set(wanted)
        while left and not self.check_event(MappingEndEvent):
            key = self.compose_node(None, 0)
            if isinstance(key, ScalarNode) and key.value in left:
                left.discard(key.value)
                value = self.compose_node(key, 0)
                if value is not None:
                    found.append((key, value))
            else:
                self._skip_node()
        return (start.start_mark.line + 1 if start.start_mark else 1), found

    def _skip_node(self) -> None:
        depth = 0
        while True:
            event = self.get_event()
            if getattr(event, "anchor", None):
                self.skipped_anchors = True
            if isinstance(event, CollectionStartEvent):
                depth += 1
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
            if depth == 0:  # a scalar, an alias, or the end of the collection it started in
                return


def load_yaml_keys(
    name: str, text: str, keys: Iterable[str], hint: str = "fix the file"
) -> YamlMap | None:
    """Only ``keys`` of the top-level mapping of ``text``, read until the last of them is found
    (the rest of the file is not parsed); None when the document is not a mapping. Same types,
    lines and limits as ``load_yaml``."""
    composer = _PartialComposer(text)
    try:
        top = composer.top_level(frozenset(keys))
    except yaml.MarkedYAMLError as exc:
        if composer.skipped_anchors:  # an alias to an anchor in a skipped value: read it all
            whole = load_yaml(name, text, hint)
            return _subset(whole, keys) if isinstance(whole, YamlMap) else None
        raise _syntax_error(name, exc, hint) from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"{name}: not valid YAML: {exc}", hint) from None
    finally:
        composer.dispose()
    if top is None:
        return None
    line, found = top
    mapping = YamlMap(line)
    builder = _Builder(name, hint)
    for key, value in found:
        mapping.key_lines[key.value] = key.start_mark.line + 1
        mapping[key.value] = builder.build(value, 1)
    return mapping


def _subset(whole: YamlMap, keys: Iterable[str]) -> YamlMap:
    mapping = YamlMap(whole.line)
    for key in keys:
        if key in whole:
            mapping.key_lines[key] = whole.key_line(key)
            mapping[key] = whole[key]
    return mapping


class YamlMap(dict[Any, Any]):
    """A mapping read from YAML: the line it starts on and the line of each key (1-based)."""

    __slots__ = ("key_lines", "line")

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.key_lines: dict[Any, int] = {}

    def key_line(self, key: Any) -> int:
        return self.key_lines.get(key, self.line)


class YamlSeq(list[Any]):
    """A sequence read from YAML: the line it starts on and the line of each item (1-based)."""

    __slots__ = ("item_lines", "line")

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.item_lines: list[int] = []

    def item_line(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


def _scalar(node: ScalarNode) -> Any:
    value: str = node.value
    if node.tag != _PLAIN:  # quoted, literal, folded, or an explicit tag (!!int, !!str ...)
        return value if node.tag == _STR else _tagged(node)
    if value in _NULLS:
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    first = value[0]
    if first in "0123456789+-.":
        if _INT_RE.match(value):
            return int(value)
        if _HEX_RE.match(value):
            return int(value[2:], 16)
        if _FLOAT_RE.match(value):
            return float(value)
        if _INF_RE.match(value):
            return -math.inf if first == "-" else math.inf
        if _NAN_RE.match(value):
            return math.nan
    return value


def _tagged(node: ScalarNode) -> Any:
    value: str = node.value
    if node.tag == _NULL:
        return None
    if node.tag == _BOOL and (value in _TRUE or value in _FALSE):
        return value in _TRUE
    if node.tag == _INT and _TAGGED_INT_RE.match(value):
        return int(value)
    if node.tag == _FLOAT and _TAGGED_FLOAT_RE.match(value):
        return float(value)
    return value  # an unknown or application tag: the text as written


class _Builder:
    """Turns composed nodes into ``YamlMap``/``YamlSeq``/scalars (plain dicts and lists when not
    ``lines``), refusing what the module docstring says it refuses."""

    def __init__(
        self,
        name: str,
        hint: str,
        error: type[EnvfactoryError] = CatalogError,
        lines: bool = True,
    ) -> None:
        self.name = name
        self.hint = hint
        self.error = error
        self.lines = lines
        self.seen: set[int] = set()
        self.alias_nodes = 0

    def fail(self, node: Node, message: str) -> EnvfactoryError:
        return self.error(f"{self.name}:{node.start_mark.line + 1}: {message}", self.hint)

    def limit(self, node: Node, message: str) -> EnvfactoryError:
        return self.error(f"{self.name}:{node.start_mark.line + 1}: {message}", LIMIT_HINT)

    def build(self, node: Node, depth: int = 0, aliased: bool = False) -> Any:
        """``depth``: how many collections enclose ``node``."""
        if id(node) in self.seen:  # an alias: the composer hands back the anchored node again
            aliased = True
        elif isinstance(node, MappingNode | SequenceNode):
            self.seen.add(id(node))
        if aliased:
            self.alias_nodes += 1
            if self.alias_nodes > MAX_ALIAS_NODES:
                too_many = f"YAML aliases expand to more than {MAX_ALIAS_NODES} nodes"
                raise self.limit(node, f"{too_many} (an alias bomb)")
        if isinstance(node, ScalarNode):
            return _scalar(node)
        depth += 1
        if depth > MAX_DEPTH:
            raise self.limit(node, f"YAML nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, SequenceNode):
            if not self.lines:
                return [self.build(item, depth, aliased) for item in node.value]
            seq = YamlSeq(node.start_mark.line + 1)
            for item in node.value:
                seq.item_lines.append(item.start_mark.line + 1)
                seq.append(self.build(item, depth, aliased))
            return seq
        if node.tag != _MAP and not isinstance(node, MappingNode):  # pragma: no cover
            raise self.fail(node, f"unsupported node {node.tag}")
        mapping: dict[Any, Any] = YamlMap(node.start_mark.line + 1) if self.lines else {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or (
                isinstance(key_node, ScalarNode) and key_node.value == "<<" and not key_node.style
            ):
                raise self.fail(key_node, "merge keys ('<<') are not supported; write the keys")
            key = self.build(key_node, depth, aliased)
            if isinstance(key, dict | list):
                raise self.fail(key_node, "a key is a list or mapping, not a plain value")
            if key in mapping:
                raise self.fail(key_node, f"key '{key}' appears twice in this mapping")
            if self.lines:
                cast(YamlMap, mapping).key_lines[key] = key_node.start_mark.line + 1
            mapping[key] = self.build(value_node, depth, aliased)
        return mapping


def load_yaml(name: str, text: str, hint: str = "fix the catalog data file") -> Any:
    """The single document in ``text`` as ``YamlMap``/``YamlSeq``/scalars (None when empty);
    ``name`` is the file name used in messages."""
    return _load(name, text, _Builder(name, hint))


def load_plain(
    name: str, text: str, hint: str, error: type[EnvfactoryError] = UserInputError
) -> Any:
    """``load_yaml``'s values, limits and messages as plain dicts and lists, without lines, and
    with Python's cycle collector paused while they are built: for a large document read whole
    (a lock of 16,000 packages builds millions of containers, over which the collector would
    run again and again; benchmarks/bench_lock_read.py). Errors are ``error``s with ``hint``."""
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        return _load(name, text, _Builder(name, hint, error, lines=False))
    finally:
        if collecting:
            gc.enable()


def _load(name: str, text: str, builder: _Builder) -> Any:
    composer = _Composer(text)
    try:
        node = composer.get_single_node()
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(name, exc, builder.hint, builder.error) from None
    except yaml.YAMLError as exc:
        raise builder.error(f"{name}: not valid YAML: {exc}", builder.hint) from None
    finally:
        composer.dispose()
    return None if node is None else builder.build(node)


def _syntax_error(
    name: str,
    exc: yaml.MarkedYAMLError,
    hint: str,
    error: type[EnvfactoryError] = CatalogError,
) -> EnvfactoryError:
    mark = exc.problem_mark or exc.context_mark
    where = f"{name}:{mark.line + 1}" if mark is not None else name
    problem = exc.problem or exc.context or "malformed"
    if "maximum nesting depth" in problem:  # libyaml's own limit, 1000 levels
        return error(f"{where}: YAML nests deeper than {MAX_DEPTH} levels", LIMIT_HINT)
    return error(f"{where}: not valid YAML: {problem}", hint)


class YamlReader:
    """Reads one YAML file's nodes, rejecting unknown keys and wrong types with ``file:line``.
    ``hint`` is the fix suggested when nothing more precise is known."""

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
        optional: Iterable[str] = frozenset(),
    ) -> YamlMap:
        if not isinstance(node, YamlMap):
            raise self.fail(node, f"{what} must be a mapping, got {_type_name(node)}")
        allowed = required | set(optional)
        for key in node:
            if key not in allowed:
                close = nearest(str(key), allowed, n=1)
                guess = f"did you mean '{close[0]}'? " if close else ""
                raise CatalogError(
                    f"{self.path}:{node.key_line(key)}: unknown key '{key}' in {what}",
                    f"{guess}allowed keys: {', '.join(sorted(allowed))}",
                )
        missing = sorted(required - set(node))
        if missing:
            raise self.fail(node, f"{what} lacks required key(s): {', '.join(missing)}")
        return node

    def string(self, parent: YamlMap, key: str, what: str) -> str:
        value = parent[key]
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self._type(parent, key, what, "a string")
        if isinstance(value, float):
            # YAML reads 10.0 as a float; versions must be quoted to keep "10.0" != "10".
            raise self._type(parent, key, what, "a quoted string (write '10.0', not 10.0)")
        return str(value)

    def opt_string(self, parent: YamlMap, key: str, what: str) -> str | None:
        return self.string(parent, key, what) if parent.get(key) is not None else None

    def boolean(self, parent: YamlMap, key: str, what: str) -> bool:
        value = parent[key]
        if not isinstance(value, bool):
            raise self._type(parent, key, what, "true or false")
        return value

    def integer(self, parent: YamlMap, key: str, what: str) -> int:
        value = parent[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._type(parent, key, what, "an integer")
        return value

    def strings(self, parent: YamlMap, key: str, what: str) -> tuple[str, ...]:
        value = parent[key]
        if not isinstance(value, YamlSeq) or not all(isinstance(v, str) for v in value):
            raise self._type(parent, key, what, "a list of quoted strings")
        return tuple(value)

    def sequence(self, parent: YamlMap, key: str, what: str) -> YamlSeq:
        value = parent[key]
        if not isinstance(value, YamlSeq):
            raise self._type(parent, key, what, "a list")
        return value

    def _type(self, parent: YamlMap, key: str, what: str, expected: str) -> CatalogError:
        got = _type_name(parent[key])
        return CatalogError(
            f"{self.path}:{parent.key_line(key)}: '{key}' in {what} must be {expected}, got {got}",
            self.hint,
        )


def _type_name(value: Any) -> str:
    """The YAML-ish name of a value's type, for messages."""
    if isinstance(value, YamlMap):
        return "a mapping"
    if isinstance(value, YamlSeq):
        return "a list"
    if value is None:
        return "nothing (null)"
    return type(value).__name__


def line_of(node: Any) -> int | None:
    """The line a mapping or sequence starts on; None for a scalar (it has no line of its own:
    report its key's line)."""
    return node.line if isinstance(node, YamlMap | YamlSeq) else None
