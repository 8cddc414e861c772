"""Commands of the lock stage: lock, create, verify (see issue: lock and create)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app. Filled in by the lock/create work."""
