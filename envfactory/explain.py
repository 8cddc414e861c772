"""Recognize known TensorFlow/CUDA problems in a pasted log: id, matching lines, cause, fix.

The patterns are data (``data/explain-patterns.yaml``); this module only loads and applies them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from envfactory.errors import CatalogError

MAX_LINES_PER_PROBLEM = 10


@dataclass(frozen=True)
class Pattern:
    id: str
    regexes: tuple[re.Pattern[str], ...]
    cause: str
    fix: str
    detail: str | None


@dataclass(frozen=True)
class Problem:
    id: str
    lines: tuple[str, ...]
    line_numbers: tuple[int, ...]
    cause: str
    fix: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "lines": list(self.lines), "cause": self.cause, "fix": self.fix}


@dataclass(frozen=True)
class Explanation:
    problems: tuple[Problem, ...]

    def to_json(self) -> dict[str, Any]:
        """``{"problems": [{"id", "lines", "cause", "fix"}]}``: problems in the order their first
        line appears in the log, ``lines`` (at most 10, stripped) in log order."""
        return {"problems": [p.to_json() for p in self.problems]}


def _load(text: str, path: str) -> tuple[Pattern, ...]:
    doc = YAML(typ="rt").load(text)
    if not isinstance(doc, CommentedMap) or not isinstance(doc.get("problems"), CommentedSeq):
        raise CatalogError(f"{path}: top level must be 'problems:' with a list")
    out: list[Pattern] = []
    seen: set[str] = set()
    for node in doc["problems"]:
        line = node.lc.line + 1 if isinstance(node, CommentedMap) else "?"
        if not isinstance(node, CommentedMap):
            raise CatalogError(f"{path}:{line}: each problem must be a mapping")
        keys = set(node)
        if (
            not {"id", "patterns", "cause", "fix"}
            <= keys
            <= {"id", "patterns", "cause", "fix", "detail"}
        ):
            raise CatalogError(
                f"{path}:{line}: a problem has id, patterns, cause, fix and optionally detail"
            )
        pid = str(node["id"])
        if pid in seen:
            raise CatalogError(f"{path}:{line}: duplicate problem id '{pid}'")
        seen.add(pid)
        try:
            regexes = tuple(re.compile(str(p), re.IGNORECASE) for p in node["patterns"])
        except re.error as exc:
            raise CatalogError(f"{path}:{line}: bad pattern in '{pid}': {exc}") from None
        detail = node.get("detail")
        out.append(
            Pattern(
                pid, regexes, str(node["cause"]), str(node["fix"]), str(detail) if detail else None
            )
        )
    return tuple(out)


@functools.cache
def patterns() -> tuple[Pattern, ...]:
    """The shipped patterns, loaded once."""
    path = resources.files("envfactory") / "data" / "explain-patterns.yaml"
    return _load(path.read_text(encoding="utf-8"), "explain-patterns.yaml")


def _cause(pattern: Pattern, groups: dict[str, str]) -> str:
    if pattern.detail is None:
        return pattern.cause
    try:
        return f"{pattern.cause} {pattern.detail.format(**groups)}"
    except (KeyError, IndexError):
        return pattern.cause


def explain(log: str, table: Sequence[Pattern] | None = None) -> Explanation:
    """Every recognized problem in ``log``; an empty result for a healthy log."""
    rules = patterns() if table is None else table
    hits: dict[str, list[tuple[int, str]]] = {}
    groups: dict[str, dict[str, str]] = {}
    for number, raw in enumerate(log.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        for rule in rules:
            for regex in rule.regexes:
                match = regex.search(line)
                if match:
                    hits.setdefault(rule.id, []).append((number, line))
                    if rule.id not in groups:
                        groups[rule.id] = {k: v for k, v in match.groupdict().items() if v}
                    break
    by_id = {rule.id: rule for rule in rules}
    problems = [
        Problem(
            id=pid,
            lines=tuple(text for _, text in found[:MAX_LINES_PER_PROBLEM]),
            line_numbers=tuple(n for n, _ in found[:MAX_LINES_PER_PROBLEM]),
            cause=_cause(by_id[pid], groups.get(pid, {})),
            fix=by_id[pid].fix,
        )
        for pid, found in hits.items()
    ]
    problems.sort(key=lambda p: (p.line_numbers[0], p.id))
    return Explanation(tuple(problems))
