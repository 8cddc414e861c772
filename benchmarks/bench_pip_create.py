"""The pip half of a warm ``create`` against its floor, the cache-link floor: every file of
every wheel hard-linked from the package cache's unpacked form (``wheeltree``) into an empty
prefix, nothing else (no look-up, no scripts, no RECORD). For comparison, ``installer.install``
of the same wheel files (reading and decompressing each wheel), what a create did before the
unpacked form existed.

Figure: ``pipside.prepare`` + ``pipside.install`` with every file already in the package cache
(what a second create does). Runs interleaved (floor, figure, installer, ...) so all see the
same load. Also the first (cold) prepare: copy into the cache, sha256, METADATA and RECORD
checks, unpack.

Wheels: by default the stub wheels of tests/channel_builder.py for tf114-cuda100's 23 pip
packages (real names, versions, metadata and console scripts; small payloads): envfactory's own
per-package work. ``--wheels DIR``: every ``*.whl`` in DIR, e.g. the real wheels of
tensorboard 2.15.2's closure that tests/test_realpython.py keeps (numpy, grpcio, ...: a
pip-heavy environment, ~5,000 files). Run: ``.venv/bin/python benchmarks/bench_pip_create.py
[--repeat N] [--wheels DIR]``.
"""

from __future__ import annotations

import argparse
import os
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
    args.add_argument("--wheels", type=Path, default=None)
    options = args.parse_args()
    repeat = options.repeat

    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    from envfactory.cache.pipcache import sha256_of
    from envfactory.cache.wheelinstall import scheme
    from envfactory.install import pipside
    from envfactory.lockfile.models import LockedPackage

    work = Path(tempfile.mkdtemp(prefix="bench-pip-"))
    try:
        if options.wheels is None:
            folder = add_project_wheels(
                build_wheel_folder(work / "wheels", [DATA / "pypi" / "tf114-cuda100-linux-64.json"])
            )
            label = "tf114-cuda100 (stub wheels)"
        else:
            folder, label = options.wheels, str(options.wheels)
        wanted = sorted(
            p for p in folder.glob("*.whl") if p.name != "six-1.12.0-py2.py3-none-any.whl"
        )
        packages = []
        for wheel in wanted:
            name, version = wheel.name.split("-")[:2]
            name = name.replace("_", "-")
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

        trees = [tree for _pkg, tree in prepared.wheels]
        nfiles = sum(len(t.manifest["files"]) for t in trees)

        def floor(i: int) -> float:
            prefix = work / f"floor{i}"
            started = time.perf_counter()
            made: set[str] = set()
            for tree in trees:
                files = tree.path / "files"
                for scheme_name, rel, *_rest in tree.manifest["files"]:
                    target = os.path.join(prefix, scheme_name, rel)  # noqa: PTH118
                    parent = os.path.dirname(target)  # noqa: PTH120
                    if parent not in made:
                        os.makedirs(parent, exist_ok=True)  # noqa: PTH103
                        made.add(parent)
                    os.link(files / scheme_name / rel, target)
            return time.perf_counter() - started

        def installer_alone(i: int) -> float:
            prefix = work / f"installer{i}"
            where = scheme(prefix, prefix, "linux-64", "3.7")
            started = time.perf_counter()
            for wheel in wanted:
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
        floor(-1)
        installer_alone(-1)  # warm-up: imports, page cache
        figures, floors, alone = [], [], []
        for i in range(repeat):
            floors.append(floor(i))
            figures.append(figure(i))
            alone.append(installer_alone(i))
        fig, flo = statistics.median(figures), statistics.median(floors)
        ins = statistics.median(alone)
        print(f"pip half of create, {label}: {len(packages)} wheels, {nfiles} files, {repeat} runs")
        print(f"  cold prepare (copy into the cache, hash, check)  {cold * 1e3:7.1f} ms")
        print(
            f"  warm prepare + install (figure)                  {fig * 1e3:7.1f} ms  "
            f"(min {min(figures) * 1e3:.1f}, max {max(figures) * 1e3:.1f})"
        )
        print(
            f"  hard links from the cache alone (floor)          {flo * 1e3:7.1f} ms  "
            f"(min {min(floors) * 1e3:.1f}, max {max(floors) * 1e3:.1f})"
        )
        print(
            f"  installer alone, same wheels                     {ins * 1e3:7.1f} ms  "
            f"(min {min(alone) * 1e3:.1f}, max {max(alone) * 1e3:.1f})"
        )
        print(f"  ratio figure / floor                             {fig / flo:7.2f}x")
        print(f"  ratio figure / installer alone                   {fig / ins:7.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
