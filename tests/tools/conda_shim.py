#!/usr/bin/env python3
"""A stand-in for ``conda`` that answers what ``conda-lock lock`` asks of it, solving with
py-rattler, so the real conda-lock CLI can run offline in tests (no conda binary exists here).

conda-lock runs ``<conda> --version`` and then, per platform (``CONDA_SUBDIR``),
``<conda> create --prefix P --dry-run --json --override-channels --channel C ... SPEC ...``;
the virtual packages arrive as an extra file channel whose records are named ``__*``
(shared/research/feasibility.md §1e). Everything else fails loudly so a new call is noticed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

from rattler import (
    BuildString,
    Gateway,
    GenericVirtualPackage,
    MatchSpec,
    PackageName,
    Subdir,
    Version,
    solve,
)


def _channel_dir(url: str) -> Path | None:
    parsed = urlparse(url)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def _virtual_packages(
    channels: list[str], subdir: str
) -> tuple[list[str], list[GenericVirtualPackage]]:
    """Split off the fake channel of ``__*`` records; return (real channels, virtual packages)."""
    real: list[str] = []
    virtual: list[GenericVirtualPackage] = []
    for url in channels:
        directory = _channel_dir(url)
        records = []
        if directory is not None:
            for sub in (subdir, "noarch"):
                repodata = directory / sub / "repodata.json"
                if repodata.exists():
                    data = json.loads(repodata.read_text())
                    packages = {**data.get("packages", {}), **data.get("packages.conda", {})}
                    records += list(packages.values())
        if records and all(r["name"].startswith("__") for r in records):
            virtual += [
                GenericVirtualPackage(
                    PackageName(r["name"]), Version(r["version"]), BuildString(r.get("build", "0"))
                )
                for r in records
            ]
        else:
            real.append(url)
    return real, virtual


async def _create(args: list[str]) -> int:
    channels: list[str] = []
    specs: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in ("--channel", "-c"):
            channels.append(next(it))
        elif arg in ("--prefix", "-p"):
            next(it)
        elif arg.startswith("-"):
            continue
        else:
            specs.append(arg)
    subdir = os.environ["CONDA_SUBDIR"]
    real, virtual = _virtual_packages(channels, subdir)
    records = await solve(
        sources=real,
        specs=[MatchSpec(s, strict=False) for s in specs],
        platforms=[Subdir(subdir), Subdir("noarch")],
        virtual_packages=virtual,
        gateway=Gateway(),
    )
    fetch = []
    for r in records:
        fetch.append(
            {
                "name": r.name.normalized,
                "version": str(r.version),
                "build": str(r.build),
                "build_number": r.build_number,
                "channel": str(r.channel),
                "subdir": str(r.subdir),
                "fn": r.file_name,
                "url": r.url,
                "md5": r.md5.hex() if r.md5 else None,
                "sha256": r.sha256.hex() if r.sha256 else None,
                "depends": list(r.depends),
                "constrains": list(r.constrains),
                "timestamp": 0,
            }
        )
    link = [
        {k: v for k, v in f.items() if k in ("name", "version", "build", "channel")} for f in fetch
    ]
    json.dump({"actions": {"FETCH": fetch, "LINK": link}, "success": True}, sys.stdout)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print("conda 24.1.0")
        return 0
    if argv[:1] == ["create"] and "--dry-run" in argv:
        return asyncio.run(_create(argv[1:]))
    sys.stderr.write(f"conda shim: unsupported call {argv!r}\n")
    return 64


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
