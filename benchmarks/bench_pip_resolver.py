"""Benchmark: uv against pip for the pip side of a lock, on the real index (network).

    .venv/bin/python benchmarks/bench_pip_resolver.py [--runs N]

For each target (a TF requirement, a target Python and platform, the combo's companion
constraints) it runs, as whole processes, N times each, one after the other:

* uv:  ``uv pip compile --python-version --python-platform --format pylock.toml`` (what lock runs)
* pip: ``pip install --dry-run --report --only-binary=:all: --python-version --platform``
  (what lock ran before), with a persistent ``--cache-dir`` so its repeated runs are warm too

and prints min/median/max seconds, the ratio uv/pip of the medians, and what each resolved: the
packages only one of them locks (pip evaluates environment markers for the host, so on a Python
3.7 target it misses importlib-metadata, zipp and typing-extensions) and any version difference.
Resolution only; pip downloads whole wheels to read their metadata where the index serves no
PEP 658 file, uv reads them with range requests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envfactory.catalog.loader import load_catalog
from envfactory.solve.pypi import PipTarget, packages_from_pylock, platform_tags

TARGETS = [
    ("tf114-cuda100", "tensorflow-gpu==1.14.0", "linux-64", "3.7", "2.17", ["numpy==1.16.4"]),
    ("tf23-cuda101", "tensorflow==2.3.0", "win-64", "3.8", None, []),
]


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, proc


def stats(values: list[float]) -> str:
    return (
        f"min {min(values):6.2f}  median {statistics.median(values):6.2f}  max {max(values):6.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    catalog = load_catalog()
    with tempfile.TemporaryDirectory() as tmp:
        for combo_name, requirement, platform, python, glibc, provided in TARGETS:
            combo = catalog.combo(combo_name)
            constraints = [c.requirement for c in combo.constraints_for(platform)]  # type: ignore[arg-type]
            req = Path(tmp) / "requirements.in"
            req.write_text("\n".join([requirement, *provided]) + "\n")
            con = Path(tmp) / "constraints.txt"
            con.write_text("\n".join(constraints) + "\n")
            target = PipTarget((requirement, *provided), platform, python, glibc)  # type: ignore[arg-type]
            uv_cmd = target.uv_command(req, con)
            report = Path(tmp) / "report.json"
            pip_cmd = [sys.executable, "-m", "pip", "--isolated", "install", "--dry-run"]
            pip_cmd += ["--ignore-installed", "--quiet", "--report", str(report)]
            pip_cmd += ["--target", str(Path(tmp) / "t"), "--cache-dir", str(Path(tmp) / "pip")]
            pip_cmd += ["-r", str(req), "-c", str(con), "--only-binary=:all:"]
            pip_cmd += ["--implementation", "cp", "--python-version", python]
            for tag in platform_tags(platform, glibc):  # type: ignore[arg-type]
                pip_cmd += ["--platform", tag]
            uv_times, pip_times = [], []
            uv_out = pip_out = None
            for _ in range(args.runs):
                seconds, proc = timed(uv_cmd)
                uv_times.append(seconds)
                uv_out = proc
                seconds, proc = timed(pip_cmd)
                pip_times.append(seconds)
                pip_out = proc
            assert uv_out is not None and pip_out is not None
            print(f"== {combo_name} {requirement} for {platform}, python {python}")
            print(f"  uv   {stats(uv_times)}")
            print(f"  pip  {stats(pip_times)}")
            ratio = statistics.median(uv_times) / statistics.median(pip_times)
            print(f"  uv/pip (medians): {ratio:.2f}")
            if uv_out.returncode or pip_out.returncode:
                print(f"  uv rc {uv_out.returncode}, pip rc {pip_out.returncode}")
                print("  " + (uv_out.stderr or pip_out.stderr).strip().replace("\n", "\n  "))
                continue
            uv_locked = packages_from_pylock(uv_out.stdout, target)
            uv_set: dict[str, str] = {p.name: p.version for p in uv_locked}
            from packaging.utils import canonicalize_name

            pip_set: dict[str, str] = {
                str(canonicalize_name(i["metadata"]["name"])): i["metadata"]["version"]
                for i in json.loads(report.read_text())["install"]
            }
            print(f"  packages: uv {len(uv_set)}, pip {len(pip_set)}")
            print(f"  only uv:  {sorted(set(uv_set) - set(pip_set))}")
            print(f"  only pip: {sorted(set(pip_set) - set(uv_set))}")
            diff = {
                n: (uv_set[n], pip_set[n])
                for n in uv_set.keys() & pip_set.keys()
                if uv_set[n] != pip_set[n]
            }
            print(f"  versions differ (uv, pip): {diff}")


if __name__ == "__main__":
    main()
