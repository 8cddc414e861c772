"""The pip half of a warm ``create`` against its floor: the same cached wheels installed by the
``installer`` library alone (no cache look-up, no sha256, no METADATA or RECORD check).

Figure: ``pipside.prepare`` + ``pipside.install`` of tf114-cuda100's 23 pip packages with every
file already in the package cache (what a second create does). Floor: ``installer.install`` of
the same 23 wheel files into an empty prefix. Runs interleaved (floor, figure, ...) so both see
the same load. Also the first (cold) prepare, which copies every file into the cache.

The wheels are the stub wheels of tests/channel_builder.py (real names, versions, metadata and
console scripts; small payloads), so this measures envfactory's own per-package work, not disk
bandwidth. Run: ``.venv/bin/python benchmarks/bench_pip_create.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from channel_builder import DATA, add_project_wheels, build_wheel_folder  # noqa: E402


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--repeat", type=int, default=9)
    repeat = args.parse_args().repeat

    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    from envfactory.build import pipside
    from envfactory.build.checks import LockedPackage
    from envfactory.build.pipcache import sha256_of
    from envfactory.build.wheelinstall import scheme

    work = Path(tempfile.mkdtemp(prefix="bench-pip-"))
    try:
        folder = add_project_wheels(
            build_wheel_folder(work / "wheels", [DATA / "pypi" / "tf114-cuda100-linux-64.json"])
        )
        wanted = sorted(
            p for p in folder.glob("*.whl") if p.name != "six-1.12.0-py2.py3-none-any.whl"
        )
        packages = []
        for wheel in wanted:
            name, version = wheel.name.split("-")[:2]
            packages.append(
                LockedPackage(
                    "pip", name, version, "linux-64", wheel.as_uri(), sha256=sha256_of(wheel)
                )
            )
        cache = work / "cache"
        started = time.perf_counter()
        prepared = pipside.prepare(packages, cache, platform="linux-64")
        cold = time.perf_counter() - started

        def figure(i: int) -> float:
            prefix = work / f"fig{i}"
            started = time.perf_counter()
            ready = pipside.prepare(packages, cache, platform="linux-64")
            pipside.install(ready, prefix, prefix, "linux-64", "3.7", {})
            took = time.perf_counter() - started
            assert ready.downloaded == 0 and ready.cached == len(packages)
            return took

        def floor(i: int) -> float:
            prefix = work / f"floor{i}"
            where = scheme(prefix, prefix, "linux-64", "3.7")
            started = time.perf_counter()
            for _pkg, wheel in prepared.wheels:
                with WheelFile.open(wheel) as source:
                    destination = SchemeDictionaryDestination(
                        {
                            "purelib": str(where.purelib),
                            "platlib": str(where.purelib),
                            "headers": str(where.headers),
                            "scripts": str(where.scripts),
                            "data": str(where.data),
                        },
                        interpreter=where.interpreter,
                        script_kind="posix",
                        overwrite_existing=True,  # as pip: tensorboard twice
                    )
                    install(source, destination, {"INSTALLER": b"bench\n"})
            return time.perf_counter() - started

        figure(-1)
        floor(-1)  # warm-up: imports, page cache
        figures, floors = [], []
        for i in range(repeat):
            floors.append(floor(i))
            figures.append(figure(i))
        fig, flo = statistics.median(figures), statistics.median(floors)
        print(f"pip half of create, tf114-cuda100 ({len(packages)} stub wheels), {repeat} runs")
        print(f"  cold prepare (copy into the cache, hash, check)  {cold * 1e3:7.1f} ms")
        print(
            f"  warm prepare + install (figure)                  {fig * 1e3:7.1f} ms  "
            f"(min {min(figures) * 1e3:.1f}, max {max(figures) * 1e3:.1f})"
        )
        print(
            f"  installer alone, same wheels (floor)             {flo * 1e3:7.1f} ms  "
            f"(min {min(floors) * 1e3:.1f}, max {max(floors) * 1e3:.1f})"
        )
        print(f"  ratio figure / floor                             {fig / flo:7.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
