"""Measurement: does an era bound (uv --exclude-newer) change the pip closure of each combo?

    .venv/bin/python benchmarks/measure_era.py

For the first pip-route platform of every combo, at its default Python, it resolves the pip side
with uv against the real index twice, with the companion constraints and the conda side's pins
both times: without a date bound, and with ``--exclude-newer`` set to the day the next TF line's
first release reached PyPI (``ERA``, from the wheels' upload times). It prints, per combo, the
number of packages of each and every package whose version differs (``null``: absent). Results
and the decision: docs/closures.md ("An era bound").
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import Combo, Platform
from envfactory.errors import ToolError
from envfactory.lockfile.models import LockedPackage
from envfactory.render.environment import environment_spec
from envfactory.solve.pypi import PipTarget, lock_target

# TF line -> upload day of the first wheel of the next line released after it (PyPI simple API)
ERA = {
    "1.14": "2019-09-30", "2.1": "2020-05-07", "2.2": "2020-07-27", "2.3": "2020-12-14",
    "2.4": "2021-05-13", "2.5": "2021-08-11", "2.6": "2021-11-04", "2.7": "2022-02-02",
    "2.8": "2022-05-16", "2.9": "2022-09-06", "2.10": "2022-11-18", "2.11": "2023-03-22",
    "2.12": "2023-07-05", "2.13": "2023-09-26", "2.14": "2023-11-14", "2.15": "2024-03-09",
    "2.16": "2024-07-11", "2.17": "2024-10-25", "2.18": "2025-03-12", "2.19": "2025-08-13",
    "2.20": "2026-03-06",
}  # fmt: skip


def closure(combo: Combo, platform: Platform, era: str | None) -> dict[str, str] | str:
    spec = environment_spec(combo, platform)
    route = combo.route(platform)
    conda = tuple(
        LockedPackage(manager="conda", name=p.name, version=p.version, platform=platform, url="-")
        for p in spec.conda
    )
    glibc = route.glibc or ("2.17" if platform == "linux-64" else None)
    target = PipTarget(
        tuple(p.requirement for p in route.pip),
        platform,
        spec.python,
        glibc,
        conda,
        combo.constraints_for(platform),
        None,
        era,
    )
    try:
        return {p.name: p.version for p in lock_target(target)}
    except ToolError as exc:
        return exc.message.splitlines()[0]


def measure(case: tuple[Combo, Platform]) -> str:
    combo, platform = case
    era = ERA.get(".".join(combo.tensorflow.value.split(".")[:2]))
    free, bounded = closure(combo, platform, None), closure(combo, platform, era)
    if isinstance(free, str) or isinstance(bounded, str):
        return f"{combo.name} {platform} {era} ERROR {free if isinstance(free, str) else bounded}"
    names = sorted(set(free) | set(bounded))
    diff = {n: (free.get(n), bounded.get(n)) for n in names if free.get(n) != bounded.get(n)}
    return f"{combo.name} {platform} {era} {len(free)} {len(bounded)} {json.dumps(diff)}"


def main() -> None:
    cases = []
    for combo in load_catalog():
        for platform, route in combo.platforms.items():
            if route.route.value in ("conda-cuda+pip", "pip-and-cuda"):
                cases.append((combo, platform))
                break
    with ThreadPoolExecutor(6) as pool:
        for line in pool.map(measure, cases):
            print(line, flush=True)


if __name__ == "__main__":
    main()
