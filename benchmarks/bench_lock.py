"""Benchmark: per-platform solve time and whole-combo lock time.

    .venv/bin/python benchmarks/bench_lock.py [--repeat N]

Inputs:
* the test channels (tests/channel_builder.py): Anaconda ``defaults`` stubs for tf114-cuda100
  (+ decoys) and the 663-record pangeo conda-forge channel for tf210-cuda112;
* a generated ``defaults`` channel of the same real records plus at least 20,000 synthetic
  records per platform (2,000 names x 10 versions, each depending on up to three lower names),
  repodata only, so the solver has to load and index a channel of realistic size.

Whole-combo lock time includes rendering, the pip resolution (a pip subprocess against the local
wheel folder), conda-lock's content hash and writer, and the atomic writes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from channel_builder import (
    DATA,
    TIMESTAMP_MS,
    build_channel,
    build_wheel_folder,
    conda_forge_packages,
    defaults_packages,
)

from envfactory.build.channels import ChannelMap
from envfactory.build.lock import LockRequest, lock_combo, solve_platform
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import PLATFORMS, Platform

NAMES = 2000
VERSIONS = 10


def generated_channel(root: Path, base: Path) -> int:
    """Copy ``base``'s repodata and add NAMES x VERSIONS synthetic records to each subdir."""
    rng = random.Random(20240601)
    count = 0
    for subdir in ("linux-64", "win-64", "noarch"):
        doc = json.loads((base / subdir / "repodata.json").read_text())
        packages = doc.setdefault("packages", {})
        if subdir != "noarch":
            for i in range(NAMES):
                for v in range(VERSIONS):
                    deps = [
                        f"gen-pkg-{j:04d} >={rng.randint(1, 5)}.0"
                        for j in sorted(rng.sample(range(i), k=min(i, rng.randint(0, 3))))
                    ]
                    name = f"gen-pkg-{i:04d}"
                    fn = f"{name}-{v + 1}.0-0.tar.bz2"
                    packages[fn] = {
                        "name": name,
                        "version": f"{v + 1}.0",
                        "build": "0",
                        "build_number": 0,
                        "depends": deps,
                        "md5": f"{rng.getrandbits(128):032x}",
                        "sha256": f"{rng.getrandbits(256):064x}",
                        "subdir": subdir,
                        "timestamp": TIMESTAMP_MS,
                    }
            count = max(count, len(packages))
        target = root / subdir / "repodata.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(doc))
    return count


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), min(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    catalog = load_catalog()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        defaults = build_channel(root / "defaults", defaults_packages())
        forge = build_channel(root / "conda-forge", conda_forge_packages())
        wheels = build_wheel_folder(root / "wheels", sorted((DATA / "pypi").glob("*.json")))
        print(f"built test channels in {time.perf_counter() - start:.2f} s")
        start = time.perf_counter()
        records = generated_channel(root / "generated", defaults)
        print(
            f"generated channel: {records} records per platform subdir "
            f"in {time.perf_counter() - start:.2f} s"
        )
        cases = [
            ("tf114-cuda100", "test channel", {"defaults": defaults}),
            ("tf210-cuda112", "test channel (pangeo, 663 records)", {"conda-forge": forge}),
            (
                "tf114-cuda100",
                f"generated channel ({records} records)",
                {"defaults": root / "generated"},
            ),
        ]
        print(f"\nmedian (min) of {args.repeat} runs")
        for combo_name, label, mapping in cases:
            combo = catalog.combo(combo_name)
            cmap = ChannelMap({k: v.as_uri() for k, v in mapping.items()})
            platforms: tuple[Platform, ...] = tuple(p for p in PLATFORMS if p in combo.platforms)
            if combo_name == "tf210-cuda112":
                platforms = ("linux-64",)
            request = LockRequest.for_combo(
                combo, platforms=platforms, channel_map=cmap, pip_index=str(wheels)
            )
            for platform in platforms:

                def solve_one(r: LockRequest = request, p: Platform = platform) -> None:
                    solve_platform(r, p)

                med, best = timed(solve_one, args.repeat)
                print(f"solve  {combo_name:14} {platform:8} {label:40} {med:7.3f} s ({best:.3f})")
            out = root / "locks" / combo_name

            def lock_all(r: LockRequest = request, o: Path = out) -> None:
                lock_combo(r, o)

            med, best = timed(lock_all, args.repeat)
            joined = "+".join(platforms)
            print(f"lock   {combo_name:14} {joined:17} {label:40} {med:7.3f} s ({best:.3f})")
        deep = LockRequest.for_combo(
            catalog.combo("tf114-cuda100"),
            platforms=("linux-64",),
            channel_map=ChannelMap({"defaults": (root / "generated").as_uri()}),
        )
        from envfactory.build import rattler_adapter

        specs = [*deep.conda_specs("linux-64"), "gen-pkg-1999", "gen-pkg-1500", "gen-pkg-1000"]
        vpk = deep.virtual("linux-64")
        url = [(root / "generated").as_uri()]
        holder: list[int] = []

        def solve_deep() -> None:
            holder[:] = [len(rattler_adapter.solve(specs, url, "linux-64", vpk))]

        med, best = timed(solve_deep, args.repeat)
        print(
            f"solve  tf114 pins + 3 deep generated roots ({holder[0]} packages) "
            f"{'':10} {med:7.3f} s ({best:.3f})"
        )


if __name__ == "__main__":
    main()
