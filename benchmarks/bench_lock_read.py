"""Benchmark: reading a large lock (``lockfile.read_lock``), and the sort inside it, by size.

    .venv/bin/python benchmarks/bench_lock_read.py [--sizes 2000,4000,8000,16000] [--old-timeout S]

Input: synthetic conda-lock v1 files of N conda packages for linux-64, every field valid, in two
shapes: ``chain`` (each package needs the next one: the deepest graph, the worst case of conda's
sort) and ``wide`` (each package needs the three before it). Issue 28 measured 12-20 s for
16,000 packages. For each file: CPU seconds (``time.process_time``, less sensitive than wall time
to the load of a shared machine) of ``read_lock`` as a whole, of the YAML load alone
(``yamlio.load_plain``, as read_lock loads it: libyaml's composer, bounded and typed while the
values are built, the cycle collector paused), of PyYAML's own loader (``yaml.load`` with
libyaml's ``CSafeLoader``, what read_lock used before, after a separate bounds walk), and of
the sort alone, envfactory's (``lockfile.toposort``) and conda's own (``toposort`` as conda-lock
vendors it; what read_lock computed before), the latter cut off after ``--old-timeout`` seconds
(default 30) in a child process.

Growth per doubling of N is printed: ~2x is linear, ~4x quadratic.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OLD_SORT = """
import pickle, sys, time
from conda_lock.interfaces.vendored_conda import toposort
graph = pickle.loads(sys.stdin.buffer.read())
start = time.process_time()
toposort(graph)
print(f"{time.process_time() - start:.3f}")
"""


def synthetic_lock(n: int, shape: str) -> str:
    lines = [
        "version: 1",
        "metadata:",
        "  content_hash:",
        f"    linux-64: '{'0' * 64}'",
        "  channels:",
        "  - url: https://example.org/ch",
        "    used_env_vars: []",
        "  platforms:",
        "  - linux-64",
        "  sources:",
        "  - environment.yml",
        "package:",
    ]
    for i in range(n):
        name = f"pkg{i:05d}"
        if shape == "chain":
            deps = [f"pkg{i + 1:05d}"] if i + 1 < n else []
        else:
            deps = [f"pkg{j:05d}" for j in range(max(0, i - 3), i)]
        lines += [f"- name: {name}", "  version: '1.0'", "  manager: conda", "  platform: linux-64"]
        if deps:
            lines += ["  dependencies:", *(f"    {d}: ''" for d in deps)]
        else:
            lines.append("  dependencies: {}")
        lines += [
            f"  url: https://example.org/ch/linux-64/{name}-1.0-0.tar.bz2",
            "  hash:",
            f"    md5: {hashlib.md5(name.encode()).hexdigest()}",
            f"    sha256: {hashlib.sha256(name.encode()).hexdigest()}",
            "  category: main",
            "  optional: false",
        ]
    return "\n".join(lines) + "\n"


def graph_of(n: int, shape: str) -> dict[str, set[str]]:
    out = {}
    for i in range(n):
        if shape == "chain":
            out[f"pkg{i:05d}"] = {f"pkg{i + 1:05d}"} if i + 1 < n else set()
        else:
            out[f"pkg{i:05d}"] = {f"pkg{j:05d}" for j in range(max(0, i - 3), i)}
    return out


def old_sort(graph: dict[str, set[str]], timeout: float) -> str:
    import pickle

    try:
        proc = subprocess.run(
            [sys.executable, "-c", OLD_SORT],
            input=pickle.dumps(graph),
            capture_output=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return f"> {timeout:.0f}"
    return proc.stdout.decode().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,4000,8000,16000")
    parser.add_argument("--old-timeout", type=float, default=30.0)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    import yaml  # type: ignore[import-untyped,unused-ignore]

    from envfactory.lockfile.read import read_lock, toposort
    from envfactory.yamlio import load_plain

    print(f"{'shape':6} {'N':>6} {'read_lock':>10} {'yaml load':>10} {'CSafeLoader':>12} "
          f"{'sort':>8} {'conda sort':>11}  (CPU seconds)")  # fmt: skip
    for shape in ("chain", "wide"):
        previous: float | None = None
        for n in sizes:
            text = synthetic_lock(n, shape)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "conda-lock.yml"
                path.write_text(text)
                start = time.process_time()
                read_lock(path)
                total = time.process_time() - start
            start = time.process_time()
            load_plain("x", text, "")
            load = time.process_time() - start
            start = time.process_time()
            gc.disable()  # as read_lock loaded it before
            yaml.load(text, Loader=yaml.CSafeLoader)
            gc.enable()
            pyyaml = time.process_time() - start
            graph = graph_of(n, shape)
            start = time.process_time()
            toposort(graph)
            sort = time.process_time() - start
            old = old_sort(graph, args.old_timeout)
            growth = f"  x{total / previous:.1f} per doubling" if previous else ""
            print(
                f"{shape:6} {n:>6} {total:>10.2f} {load:>10.2f} {pyyaml:>12.2f} {sort:>8.3f} "
                f"{old:>11}{growth}"
            )
            previous = total


if __name__ == "__main__":
    main()
