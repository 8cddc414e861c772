"""What every benchmark script shares: timing whole processes against their floor in one run,
min/median/max, the ratio, and one output format.

A *figure* is something a user waits for (``envfactory list``, ``lock --check`` of 50
environments); its *floor* is the least that work could cost on this machine, measured in the
same run, interleaved with the figure (floor, figure, floor, figure, ...) so that both see the
same load: ``python -c pass`` for start-up, a libyaml read of the same files for reading,
rattler's solve alone for solving. The ratio is median / floor median. A target, where the issue
sets one, is checked against the figure and the ratio and reported, never asserted.

Protocol (run_all.py relies on it): a benchmark built on this module accepts ``--repeat N`` and
``--json PATH``; it prints its table and, with ``--json``, writes ``{"title": ..., "rows":
[Row.as_dict(), ...], "notes": [...]}`` to PATH. Benchmarks that are not (bench_create.py,
bench_explain.py, bench_activation.py, bench_hostile.py) are run as they are by run_all.py and
their output is included verbatim.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BIN = Path(sys.executable).parent
ENVFACTORY = str(BIN / "envfactory")
FLOOR_PASS = "python -c pass"
# Processes run as an installed envfactory runs: with bytecode caching (pip compiles a wheel on
# install). A PYTHONDONTWRITEBYTECODE=1 environment would make every run compile every module
# again; the untimed warm-up run writes the caches.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@dataclass
class Times:
    """Seconds of repeated runs of one thing: wall-clock (what a user waits for) and CPU (user +
    system of the process and its children: what the code costs, much less sensitive to other
    load on the machine)."""

    runs: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None

    @property
    def min(self) -> float:
        return min(self.runs)

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def max(self) -> float:
        return max(self.runs)


@dataclass(frozen=True)
class Target:
    """A goal from the issue: at most ``seconds`` (median) and/or at most ``ratio`` x floor."""

    seconds: float | None = None
    ratio: float | None = None

    def describe(self) -> str:
        parts = []
        if self.seconds is not None:
            parts.append(f"<= {self.seconds:g} s")
        if self.ratio is not None:
            parts.append(f"<= {self.ratio:g}x")
        return " and ".join(parts)


@dataclass(frozen=True)
class Row:
    """One figure with its floor, as printed and as written to JSON."""

    figure: str
    times: Times
    floor: str | None = None
    floor_times: Times | None = None
    target: Target | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.floor_times is None or not self.floor_times.runs:
            return None
        return self.times.median / self.floor_times.median

    @property
    def cpu_ratio(self) -> float | None:
        if self.floor_times is None or self.times.cpu_median is None:
            return None
        floor = self.floor_times.cpu_median
        return self.times.cpu_median / floor if floor else None

    @property
    def meets(self) -> bool | None:
        if self.target is None:
            return None
        ok = True
        if self.target.seconds is not None:
            ok = ok and self.times.median <= self.target.seconds
        if self.target.ratio is not None and self.ratio is not None:
            ok = ok and self.ratio <= self.target.ratio
        return ok

    def as_dict(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "runs": len(self.times.runs),
            "min": self.times.min,
            "median": self.times.median,
            "max": self.times.max,
            "cpu_median": self.times.cpu_median,
            "floor": self.floor,
            "floor_median": self.floor_times.median if self.floor_times else None,
            "floor_cpu_median": self.floor_times.cpu_median if self.floor_times else None,
            "ratio": self.ratio,
            "cpu_ratio": self.cpu_ratio,
            "target": self.target.describe() if self.target else None,
            "meets": self.meets,
            "note": self.note,
        }


def run_quiet(
    command: Sequence[str],
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
) -> None:
    """Run ``command``; a failure is a broken benchmark, so it stops with the command's stderr."""
    done = subprocess.run(
        list(command),
        cwd=cwd,
        env=ENV if env is None else dict(env),
        input=stdin,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr.decode(errors="replace"))
        raise SystemExit(f"benchmark command failed ({done.returncode}): {' '.join(command)}")


def process(
    command: Sequence[str],
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    ok_codes: tuple[int, ...] = (0,),
) -> Callable[[], None]:
    """A whole-process run of ``command`` as a callable, for ``paired``."""

    def action() -> None:
        done = subprocess.run(
            list(command),
            cwd=cwd,
            env=ENV if env is None else dict(env),
            input=stdin,
            capture_output=True,
            check=False,
        )
        if done.returncode not in ok_codes:
            sys.stderr.write(done.stderr.decode(errors="replace"))
            raise SystemExit(f"benchmark command failed ({done.returncode}): {' '.join(command)}")

    return action


def _cpu() -> float:
    """CPU seconds of this process and its finished children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(action: Callable[[], object], into: Times) -> None:
    cpu = _cpu()
    start = time.perf_counter()
    action()
    into.runs.append(time.perf_counter() - start)
    into.cpu.append(_cpu() - cpu)


def paired(
    figure: Callable[[], object],
    floor: Callable[[], object] | None,
    repeat: int,
    warmup: int = 1,
) -> tuple[Times, Times | None]:
    """Time ``figure`` and ``floor`` alternately ``repeat`` times each, after ``warmup`` untimed
    runs of both (the first run pays for cold page caches, not for our code)."""
    for _ in range(warmup):
        if floor is not None:
            floor()
        figure()
    fig = Times()
    flo = Times() if floor is not None else None
    for _ in range(repeat):
        if floor is not None and flo is not None:
            timed(floor, flo)
        timed(figure, fig)
    return fig, flo


def parser(description: str, repeat: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--repeat", type=int, default=repeat, help=f"runs per figure (default {repeat})")
    p.add_argument("--json", type=Path, help="also write the rows to this file (for run_all.py)")
    return p


def machine() -> str:
    cpus = os.cpu_count() or 0
    try:
        load = f" load {os.getloadavg()[0]:.1f}"
    except OSError:  # pragma: no cover - Windows
        load = ""
    system = f"{platform.system()} {platform.machine()}"
    return f"{system}, {cpus} CPUs,{load}, Python {platform.python_version()}"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def table(rows: Sequence[Row] | Sequence[Mapping[str, Any]]) -> str:
    """A markdown table (readable as plain text too) of the rows."""
    head = (
        "| figure | min | median | max | CPU (median) | floor: median, CPU | ratio (CPU ratio) "
        "| target |"
    )
    lines = [head, "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    for row in rows:
        d = row.as_dict() if isinstance(row, Row) else dict(row)
        floor = "-"
        if d["floor"]:
            floor = f"{d['floor']}: {_ms(d['floor_median'])}, {_ms(d.get('floor_cpu_median'))}"
        ratio = f"{d['ratio']:.1f}x" if d["ratio"] is not None else "-"
        if d.get("cpu_ratio") is not None:
            ratio += f" ({d['cpu_ratio']:.1f}x)"
        target = "-"
        if d["target"]:
            target = f"{d['target']}: {'met' if d['meets'] else 'NOT met'}"
        figure = d["figure"] + (f" ({d['note']})" if d.get("note") else "")
        lines.append(
            f"| {figure} | {_ms(d['min'])} | {_ms(d['median'])} | {_ms(d['max'])} "
            f"| {_ms(d.get('cpu_median'))} | {floor} | {ratio} | {target} |"
        )
    return "\n".join(lines)


def report(
    title: str, rows: Sequence[Row], args: argparse.Namespace, notes: Sequence[str] = ()
) -> None:
    """Print the table (and the notes), and write the JSON file when asked."""
    print(f"## {title}\n")
    print(f"{args.repeat} runs per figure; {machine()}\n")
    print(table(rows))
    for line in notes:
        print(f"\n{line}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"title": title, "rows": [r.as_dict() for r in rows], "notes": list(notes)},
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
