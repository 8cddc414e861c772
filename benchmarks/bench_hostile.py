"""Benchmark: what hostile YAML costs the lock reader, before and after the bounds check.

    .venv/bin/python benchmarks/bench_hostile.py [--old-timeout S]

Input: a real third-party conda-lock.yml (tests/data/real-envs, pangeo TF 2.10, ~660 packages),
then the same file with the 1 KB billion-laughs block of issue 10 (nine anchors, each aliasing
the previous nine times: 10**9 nodes expanded) inside ``metadata.custom_metadata``, then with
5000 levels of nesting. For each: seconds and peak RSS of ``read_lock`` (in a fresh process, so
the peaks do not mix), and of conda-lock's own ``parse_conda_lock_file`` (what envfactory used
before, its error message included), the latter cut off after ``--old-timeout`` seconds
(default 20).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = (
    ROOT / "tests/data/real-envs"
    / "tf2.10.0-cuda11.2-linux64-condalock--pangeo-data-pangeo-docker-images.conda-lock.yml"
)  # fmt: skip
LAUGHS = "lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10)
)

PROBE = """
import resource, sys, time, warnings
from pathlib import Path
warnings.simplefilter("ignore")
which, path = sys.argv[1], Path(sys.argv[2])
from conda_lock.lockfile import parse_conda_lock_file
from envfactory.lockfile.read import read_lock
start = time.perf_counter()  # imports (about a second) are not counted
try:
    if which == "new":
        read_lock(path)
    else:
        parse_conda_lock_file(path)
    outcome = "read"
except MemoryError:
    outcome = "MemoryError"
except RecursionError:
    outcome = "RecursionError (a traceback)"
except Exception as exc:
    # envfactory 0.1 put the reader's error into its message (f"... {exc}"): pydantic's text
    # quotes the input, and quoting the expanded aliases is where the time and memory go.
    text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    outcome = "refused: " + text.splitlines()[0][:70]
took = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(f"{took:.3f}|{rss}|{outcome}")
"""


def measure(which: str, path: Path, timeout: float) -> str:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, which, str(path)],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"not done after {timeout:.0f} s"
    if proc.returncode != 0 or "|" not in proc.stdout:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return f"crashed (exit {proc.returncode}): {tail[:70]}"
    took, rss, outcome = proc.stdout.strip().split("|", 2)
    return f"{float(took):7.3f} s  peak RSS {int(rss):5d} MB  {outcome}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old-timeout", type=float, default=20.0)
    args = parser.parse_args()
    text = REAL.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        cases = {
            "real lock": text,
            f"+ billion laughs ({len(LAUGHS)} bytes) in custom_metadata": text.replace(
                "\nmetadata:\n",
                "\nmetadata:\n  custom_metadata:\n    envfactory.combo: tf210-cuda112\n"
                + "".join(f"    {line}\n" for line in LAUGHS.splitlines()),
                1,
            ),
            "+ 5000 levels of nesting": text + "deep: " + "[" * 5000 + "]" * 5000 + "\n",
        }
        print(f"input: {REAL.name} ({len(text) // 1024} KB)")
        for title, body in cases.items():
            path = Path(tmp) / "conda-lock.yml"
            path.write_text(body, encoding="utf-8")
            print(f"== {title}")
            print(f"  envfactory read_lock       {measure('new', path, 120)}")
            print(f"  conda-lock parse (before)  {measure('old', path, args.old_timeout)}")


if __name__ == "__main__":
    main()
