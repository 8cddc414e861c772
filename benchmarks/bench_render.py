"""Benchmark: catalog load, rendering every combo, and CLI start-up.

    .venv/bin/python benchmarks/bench_render.py [--repeat N]

Prints medians over N runs (default 5) and ratios:
* catalog load: parsing and validating envfactory/data/*.yaml into records (in a fresh process,
  since the loaded catalog is cached per process);
* render all: every combo x every platform it covers, default Python, in memory;
* CLI start-up: ``envfactory --version`` and ``envfactory list --json`` as subprocesses, against a
  bare ``python -c pass`` -- what a user waits for on every command. conda_lock (about 0.9 s to
  import) must stay off this path.
* peak memory (max RSS) of ``envfactory list --json``.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from envfactory.build.render import render_combo
from envfactory.catalog.loader import load_catalog

PYTHON = sys.executable
ENVFACTORY = shutil.which("envfactory", path=str(Path(sys.executable).parent)) or "envfactory"


def median_seconds(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat

    bare = median_seconds(lambda: run(PYTHON, "-c", "pass"), repeat)
    load = median_seconds(
        lambda: run(
            PYTHON, "-c", "from envfactory.catalog.loader import load_catalog; load_catalog()"
        ),
        repeat,
    )
    import_only = median_seconds(lambda: run(PYTHON, "-c", "import envfactory.catalog"), repeat)
    catalog = load_catalog()
    combos = list(catalog)
    render_all = median_seconds(lambda: [render_combo(c) for c in combos], repeat)
    version = median_seconds(lambda: run(ENVFACTORY, "--version"), repeat)
    listing = median_seconds(lambda: run(ENVFACTORY, "list", "--json"), repeat)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    run(ENVFACTORY, "list", "--json")
    peak_kib = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)

    files = sum(len(render_combo(c)) for c in combos)
    print(f"median of {repeat} runs")
    print(f"python -c pass                  {bare * 1000:8.1f} ms")
    print(
        f"catalog load (fresh process)    {(load - import_only) * 1000:8.1f} ms  "
        f"(process {load * 1000:.1f} ms, import only {import_only * 1000:.1f} ms)"
    )
    print(
        f"render all {len(combos)} combos ({files} files) {render_all * 1000:8.1f} ms  "
        f"({render_all / len(combos) * 1000:.2f} ms per combo)"
    )
    print(
        f"envfactory --version            {version * 1000:8.1f} ms  "
        f"({version / bare:.1f}x bare python)"
    )
    print(
        f"envfactory list --json          {listing * 1000:8.1f} ms  "
        f"({listing / bare:.1f}x bare python)"
    )
    print(f"peak RSS of a CLI process       {peak_kib / 1024:8.1f} MiB (max over child processes)")


if __name__ == "__main__":
    main()
