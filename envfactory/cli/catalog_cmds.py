"""Commands of the catalog and render stages: list, show, render."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add list, show and render to the app."""
