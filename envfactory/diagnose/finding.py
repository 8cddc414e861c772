"""What a check found, as ``doctor`` and ``audit`` report it, and the severities ``explain``
shares with them: one record, one severity scale, one rule for "problems found" (exit 3).

``doctor`` reports a ``Finding`` as it is; ``audit`` extends it with the cause and where the
bound came from (``audit.AuditFinding``). ``explain``'s ``Problem`` is evidence from a log (its
lines and their numbers, no message of its own) with the same severities.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Severity = Literal["problem", "warning", "info", "note"]
"""``problem``: it does not work as it is (exit 3); ``warning``: it may not; ``info``: context
(doctor); ``note``: expected on this machine, such as CUDA errors of a log from a machine without
a GPU (explain)."""


@dataclass(frozen=True)
class Finding:
    id: str
    """stable: what tests, docs and users' scripts name"""
    severity: Severity
    message: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "message": self.message, "fix": self.fix}


class _Graded(Protocol):
    @property
    def severity(self) -> Severity: ...


def count_problems(found: Iterable[_Graded]) -> int:
    """How many of ``found`` are problems: a command that found any exits with 3."""
    return sum(1 for f in found if f.severity == "problem")
