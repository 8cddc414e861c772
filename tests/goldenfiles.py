"""Golden files: output compared byte for byte with a committed file (tests/goldens/ or locks/).

``pytest --update-goldens`` rewrites each file that differs, and the test that rewrote it still
fails, naming the file: a run that changed goldens is never green, and the next plain run shows
whether the rewritten files hold.
"""

from __future__ import annotations

from pathlib import Path

import pytest

UPDATE_HINT = "if the change is intended: pytest --update-goldens, then review git diff"


class Goldens:
    """Checks rendered output against golden files; with ``update`` rewrites differing ones."""

    def __init__(self, *, update: bool) -> None:
        self.update = update
        self.rewritten: list[Path] = []

    def check(self, path: Path, content: str) -> None:
        """Pass when ``path`` holds exactly ``content`` (UTF-8 bytes: CRLF stays CRLF); otherwise
        fail, after rewriting ``path`` when updating."""
        data = content.encode("utf-8")
        old = path.read_bytes() if path.is_file() else None
        if old == data:
            return
        state = "is missing" if old is None else "differs from the output"
        if not self.update:
            pytest.fail(f"golden file {path} {state}; {UPDATE_HINT}", pytrace=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.rewritten.append(path)
        pytest.fail(
            f"--update-goldens rewrote {path} (it {state}); review git diff, then run "
            "again without --update-goldens",
            pytrace=False,
        )
