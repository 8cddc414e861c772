"""How slow steps report progress. The core never prints; the CLI passes what draws it.

Two small interfaces, the whole of it:

* ``Progress``: a callable that takes one line of text, one per phase ("linking 117 conda
  packages"). Used by lock, create, mirror and the rattler adapter; the CLI prints each line on
  stderr (none under ``-q``), tests pass a list's ``append``.
* ``Transfer``: files being fetched. ``start(total)`` once with the number of files,
  ``transferred(nbytes)`` as bytes arrive from the network (any file, any thread or worker's
  bytes summed by the caller), ``fetched(name, nbytes, outcome)`` once per file when it is ready
  (outcome: downloaded, cached, extracted, copied, ...). On a terminal the CLI draws a rich bar
  with files done, bytes and rate; elsewhere ``-v`` prints one line per file. The package
  cache's ``CacheProgress`` is this without ``transferred`` (a ``Transfer`` is one).

``stop_point`` is a hook for tests and debuggers: with ``ENVFACTORY_STOP_AT=TEXT`` in the
environment, the process stops itself (SIGSTOP) right after it printed the first progress line
that contains TEXT, so a run can be inspected, or interrupted, at a known point instead of a
guessed time (tests/test_create_safety.py cuts creates this way).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Protocol

Progress = Callable[[str], None]

STOP_AT = "ENVFACTORY_STOP_AT"


class Transfer(Protocol):
    def start(self, total: int) -> None:
        """``total`` files are wanted."""

    def transferred(self, nbytes: int) -> None:
        """``nbytes`` more bytes arrived from the network."""

    def fetched(self, name: str, nbytes: int, outcome: str) -> None:
        """One file is ready: ``nbytes`` long, and how it came (downloaded, cached, ...)."""

    def waiting(self, message: str) -> None:
        """Waiting for a lock another process holds; ``message`` says which and why."""


def silent(_line: str) -> None:
    """The default when nobody listens."""


class SilentTransfer:
    def start(self, total: int) -> None:
        pass

    def transferred(self, nbytes: int) -> None:
        pass

    def fetched(self, name: str, nbytes: int, outcome: str) -> None:
        pass

    def waiting(self, message: str) -> None:
        pass


def stop_point(line: str) -> None:
    """Stop this process after ``line`` when ``ENVFACTORY_STOP_AT`` names it (once)."""
    mark = os.environ.get(STOP_AT)
    if mark and mark in line and hasattr(signal, "SIGSTOP"):
        del os.environ[STOP_AT]
        os.kill(os.getpid(), signal.SIGSTOP)
