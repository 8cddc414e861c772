"""Commands that check hardware and logs: compat, doctor, explain, recommend."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app. Filled in by the diagnostics work."""
