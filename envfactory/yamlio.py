"""YAML adapter: ruamel's round-trip parser, whose nodes know their line numbers, and one
validating reader over them, so every data file (catalog, project manifest) reports a bad key
or value as ``file:line`` with a hint."""

from __future__ import annotations

from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from envfactory.errors import CatalogError, nearest


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
    try:
        return YAML(typ="rt").load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        raise CatalogError(f"{where}: not valid YAML: {exc}", hint) from None
