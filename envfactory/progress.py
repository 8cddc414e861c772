"""How slow steps report progress: a callable that takes one line of text.

The core never prints; the CLI passes a callable that writes to stderr (tests pass a list's
``append``). One alias, used by lock, create, mirror and the rattler adapter.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


def silent(_line: str) -> None:
    """The default when nobody listens."""
