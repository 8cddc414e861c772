"""The real-environment corpus of ``envfactory audit`` (tests/data/audit-corpus/, its
corpus.yaml says where each file comes from and what it holds, written before audit ever ran on
it) and its scoring. Shared by tests/test_audit_corpus.py and scripts/score-audit-corpus."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from envfactory.catalog.loader import load_catalog
from envfactory.diagnose.audit import AuditReport, audit_path
from envfactory.errors import EnvfactoryError
from envfactory.yamlio import load_yaml

CORPUS = Path(__file__).parent / "data" / "audit-corpus"


@dataclass(frozen=True)
class Entry:
    file: str
    repo: str
    path: str
    commit: str
    split: str
    verdict: str
    problems: frozenset[str]
    other: frozenset[str]
    why: str


def load_corpus(directory: Path = CORPUS) -> list[Entry]:
    doc = load_yaml("corpus.yaml", (directory / "corpus.yaml").read_text(encoding="utf-8"))
    out = []
    for row in doc["files"]:
        out.append(
            Entry(
                file=str(row["file"]),
                repo=str(row["repo"]),
                path=str(row["path"]),
                commit=str(row["commit"]),
                split=str(row["split"]),
                verdict=str(row["verdict"]),
                problems=frozenset(str(p) for p in row.get("problems") or ()),
                other=frozenset(str(p) for p in row.get("other") or ()),
                why=str(row["why"]),
            )
        )
    return out


@dataclass(frozen=True)
class Result:
    entry: Entry
    refused: str | None
    verdict: str | None
    found: frozenset[str]
    """keys ('id' and 'id:subject') of the TensorFlow problems audit reported"""
    found_other: frozenset[str]

    @property
    def missing(self) -> frozenset[str]:
        return self.entry.problems - self.found

    @property
    def ok(self) -> bool:
        e = self.entry
        if self.refused:
            return False
        if e.verdict == "inconsistent":
            return self.verdict == "inconsistent" and not self.missing
        return self.verdict == e.verdict


def _keys(report: AuditReport, scope: str) -> set[str]:
    out = set()
    for f in report.findings:
        if f.severity == "problem" and f.scope == scope:
            out |= {f.id, f.key}
    return out


@functools.cache
def run(entry: Entry, directory: Path = CORPUS) -> Result:
    try:
        reports = audit_path(load_catalog(), directory / entry.file)
    except EnvfactoryError as exc:
        return Result(entry, str(exc), None, frozenset(), frozenset())
    verdicts = {r.verdict for r in reports}
    verdict = (
        "inconsistent" if "inconsistent" in verdicts
        else "unknown" if "unknown" in verdicts
        else "consistent"
    )  # fmt: skip
    found: set[str] = set()
    other: set[str] = set()
    for r in reports:
        found |= _keys(r, "tensorflow")
        other |= _keys(r, "other")
    return Result(entry, None, verdict, frozenset(found), frozenset(other))


@dataclass
class Score:
    results: list[Result] = field(default_factory=list)

    def of(self, verdict: str) -> list[Result]:
        return [r for r in self.results if r.entry.verdict == verdict]

    @property
    def inconsistent_fully_reported(self) -> tuple[int, int]:
        rows = self.of("inconsistent")
        return sum(r.ok for r in rows), len(rows)

    @property
    def consistent_flagged(self) -> tuple[int, int]:
        rows = self.of("consistent")
        return sum(r.verdict == "inconsistent" for r in rows), len(rows)

    @property
    def unknown_called_consistent(self) -> tuple[int, int]:
        rows = self.of("unknown")
        return sum(r.verdict == "consistent" for r in rows), len(rows)

    @property
    def refused(self) -> list[str]:
        return [r.entry.file for r in self.results if r.refused]


def score(entries: Iterable[Entry], directory: Path = CORPUS) -> Score:
    return Score([run(e, directory) for e in entries])
