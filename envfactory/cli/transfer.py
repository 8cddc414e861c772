"""How the CLI shows files being fetched (``envfactory.progress.Transfer``): on a terminal a rich
bar with files done, bytes downloaded and the rate; elsewhere one line per file under ``-v``
and nothing otherwise (the phase lines say what happens); nothing at all under ``-q``."""

from __future__ import annotations

import sys
import time
from typing import Any

from envfactory.cli.output import QUIET, detail, level, note
from envfactory.progress import SilentTransfer


def size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


class TransferBar:
    """A rich bar on stderr: ``packages ━━━━  12/117  3.4 MiB at 1.2 MiB/s  name (outcome)``."""

    def __init__(self, label: str) -> None:
        # rich only here: importing it costs a warm create ~0.08 s (benchmarks/bench_create.py)
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        from envfactory.cli.output import stderr_console

        self.bar = Progress(
            TextColumn(f"  {label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[bytes]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"),
            console=stderr_console(),
            transient=True,
        )
        self.task: Any = None
        self.nbytes = 0
        self.began = time.monotonic()

    def start(self, total: int) -> None:
        self.began = time.monotonic()
        self.task = self.bar.add_task("", total=total, last="", bytes=self._bytes())
        self.bar.start()

    def _bytes(self) -> str:
        if not self.nbytes:
            return ""
        rate = self.nbytes / max(time.monotonic() - self.began, 1e-3)
        return f"{size(self.nbytes)} at {size(rate)}/s"

    def transferred(self, nbytes: int) -> None:
        self.nbytes += nbytes
        if self.task is not None:
            self.bar.update(self.task, bytes=self._bytes())

    def fetched(self, name: str, nbytes: int, outcome: str) -> None:
        self.bar.update(
            self.task, advance=1, last=f"{name} ({outcome}, {size(nbytes)})", bytes=self._bytes()
        )

    def waiting(self, message: str) -> None:
        self.bar.console.print(f"  {message}", markup=False, highlight=False)

    def stop(self) -> None:
        self.bar.stop()


class TransferLines:
    """One line per file under ``-v``; a summary of the bytes downloaded at the end."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.total = 0
        self.done = 0
        self.nbytes = 0
        self.began = time.monotonic()

    def start(self, total: int) -> None:
        self.total = total
        self.began = time.monotonic()

    def transferred(self, nbytes: int) -> None:
        self.nbytes += nbytes

    def fetched(self, name: str, nbytes: int, outcome: str) -> None:
        self.done += 1
        detail(f"  [{self.done}/{self.total}] {name}: {outcome}, {size(nbytes)}")

    def waiting(self, message: str) -> None:
        note(f"  {message}")  # a wait is news at every level but -q: it may be long

    def stop(self) -> None:
        if self.nbytes:
            seconds = max(time.monotonic() - self.began, 1e-3)
            detail(
                f"  {self.label}: downloaded {size(self.nbytes)} in {seconds:.1f} s "
                f"({size(self.nbytes / seconds)}/s)"
            )


class _Quiet(SilentTransfer):
    def stop(self) -> None:
        pass


def transfer_display(label: str) -> TransferBar | TransferLines | _Quiet:
    """What shows ``label``'s files (``packages``, ``wheels``): call ``stop()`` at the end."""
    if level() == QUIET:
        return _Quiet()
    if sys.stderr.isatty():
        return TransferBar(label)
    return TransferLines(label)
