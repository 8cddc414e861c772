"""Benchmark: per-platform solve and whole ``envfactory lock``, against rattler's solve alone.

    .venv/bin/python benchmarks/bench_lock.py [--repeat N] [--json PATH]

Inputs:
* the test channels (tests/channel_builder.py): Anaconda ``defaults`` stubs for tf114-cuda100
  (+ decoys) and the 663-record pangeo conda-forge channel for tf210-cuda112;
* a generated ``defaults`` channel of the same real records plus at least 20,000 synthetic
  records per platform (2,000 names x 10 versions, each depending on up to three lower names),
  repodata only, so the solver has to load and index a channel of realistic size.

Figures (whole processes, interleaved with their floor): ``solve_platform`` (the solve and the
post-solve checks) of each platform, and ``envfactory lock`` of the combo, which adds rendering,
the pip resolution (a pip subprocess against the local wheel folder), conda-lock's content hash
and writer, and the atomic writes. The floor of both is a process that runs rattler's solve
alone with the same specs, channels and virtual packages.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

from harness import ENVFACTORY, PYTHON, Row, paired, parser, process, report, run_quiet

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from channel_builder import (
    DATA,
    TIMESTAMP_MS,
    build_channel,
    build_wheel_folder,
    conda_forge_packages,
    defaults_packages,
)

from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import PLATFORMS, Platform
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest

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


# Both scripts end with os._exit: py-rattler 0.28 can crash at interpreter exit after a solve
# (shared/research/feasibility.md), as envfactory's own CLI does.
RAW_SOLVE = """
import asyncio, json, os, sys
import rattler
from rattler import BuildString, GenericVirtualPackage, MatchSpec, PackageName, Version
for job in json.loads(sys.argv[1]):
    virtual = []
    for name, text in sorted(job["virtual"].items()):
        version, _, build = text.partition("=")
        virtual.append(
            GenericVirtualPackage(PackageName(name), Version(version), BuildString(build or "0"))
        )
    asyncio.run(
        rattler.solve(
            sources=job["channels"],
            specs=[MatchSpec(s, strict=False) for s in job["specs"]],
            gateway=rattler.Gateway(),
            platforms=[job["platform"], "noarch"],
            virtual_packages=virtual,
        )
    )
sys.stdout.flush()
os._exit(0)
"""


def solve_jobs(request: LockRequest) -> list[dict[str, object]]:
    """What rattler's solve alone gets for each platform of ``request``: the same specs,
    channels and virtual packages as ``solve_platform``."""
    return [
        {
            "specs": list(request.inputs[p].conda),
            "channels": list(request.inputs[p].channel_urls),
            "platform": p,
            "virtual": dict(request.inputs[p].virtual_packages),
        }
        for p in request.platforms
    ]


def main() -> None:
    args = parser(__doc__.splitlines()[0], repeat=5).parse_args()
    catalog = load_catalog()
    rows: list[Row] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        defaults = build_channel(root / "defaults", defaults_packages())
        forge = build_channel(root / "conda-forge", conda_forge_packages())
        wheels = build_wheel_folder(root / "wheels", sorted((DATA / "pypi").glob("*.json")))
        records = generated_channel(root / "generated", defaults)
        notes.append(
            f"test channels built and a channel of {records} records per platform generated in "
            f"{time.perf_counter() - start:.1f} s"
        )
        cases = [
            ("tf114-cuda100", "test channel", {"defaults": defaults}),
            ("tf210-cuda112", "pangeo's 663 records", {"conda-forge": forge}),
            ("tf114-cuda100", f"{records} records", {"defaults": root / "generated"}),
        ]
        for combo_name, label, mapping in cases:
            combo = catalog.combo(combo_name)
            cmap = ChannelMap({k: v.as_uri() for k, v in mapping.items()})
            platforms: tuple[Platform, ...] = tuple(p for p in PLATFORMS if p in combo.platforms)
            if combo_name == "tf210-cuda112":
                platforms = ("linux-64",)
            request = LockRequest.for_combo(
                combo, platforms=platforms, channel_map=cmap, pip_index=str(wheels)
            )
            jobs = solve_jobs(request)
            for platform, job in zip(platforms, jobs, strict=True):

                def raw(j: dict[str, object] = job) -> None:
                    run_quiet([PYTHON, "-c", RAW_SOLVE, json.dumps([j])])

                times, floor = paired(
                    process(
                        [
                            PYTHON,
                            "-c",
                            SOLVE_ONE,
                            combo_name,
                            platform,
                            json.dumps({k: v.as_uri() for k, v in mapping.items()}),
                            str(wheels),
                        ]
                    ),
                    raw,
                    args.repeat,
                )
                rows.append(
                    Row(
                        f"solve {combo_name} {platform}, {label} (solve_platform: solve + "
                        "post-solve checks, whole process)",
                        times,
                        "rattler's solve alone, whole process",
                        floor,
                    )
                )
            flags = [f"--channel-map={k}={v}" for k, v in mapping.items()]
            flags += [f"--platform={p}" for p in platforms]
            out = root / "locks"
            lock = process(
                [ENVFACTORY, "lock", combo_name, *flags, "--pip-index", str(wheels),
                 "-o", str(out)]
            )  # fmt: skip
            raw_all = process([PYTHON, "-c", RAW_SOLVE, json.dumps(jobs)])
            times, floor = paired(lock, raw_all, args.repeat)
            rows.append(
                Row(
                    f"envfactory lock {combo_name} ({'+'.join(platforms)}, {label})",
                    times,
                    "rattler's solve alone of the same platforms, whole process",
                    floor,
                )
            )
    report("solve and lock", rows, args, notes=notes)


SOLVE_ONE = """
import json, os, sys
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, solve_platform
from envfactory.catalog.loader import load_catalog
combo, platform, mapping, wheels = sys.argv[1:]
request = LockRequest.for_combo(
    load_catalog().combo(combo), platforms=(platform,), channel_map=ChannelMap(json.loads(mapping)),
    pip_index=wheels,
)
solve_platform(request, platform)
sys.stdout.flush()
os._exit(0)
"""


if __name__ == "__main__":
    main()
