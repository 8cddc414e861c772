#!/usr/bin/env python3
"""Proof that a lock's pip closure imports: lock the pip side of a combo for this machine's
Python (uv, the real index, the combo's companion constraints), install exactly those files into
a throwaway virtual environment with ``pip install --no-deps --require-hashes``, and run
``import tensorflow as tf; tf.test.is_built_with_cuda()`` there.

    .venv/bin/python scripts/import-proof.py [COMBO ...] [--record docs/import-proof.md]

Default combos: the oldest and the newest pip-route combo whose Python range includes this
machine's Python. Not part of the test run: the wheels are large (GBs with the NVIDIA
libraries). The conda side of a conda-cuda+pip route (cudatoolkit, cudnn) is not installed, so
the GPU is not used; the proof is that the closure imports and is the CUDA build.
"""

from __future__ import annotations

import argparse
import datetime
import platform as host
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import Combo
from envfactory.solve.pypi import PipTarget, lock_target

PIP_ROUTES = ("conda-cuda+pip", "pip-and-cuda")
PROBE = (
    "import tensorflow as tf, google.protobuf as pb, numpy as np; "
    "print('tensorflow', tf.__version__, '| built with CUDA:', tf.test.is_built_with_cuda(), "
    "'| protobuf', pb.__version__, '| numpy', np.__version__)"
)


def candidates(python: str) -> list[Combo]:
    out = [
        c
        for c in load_catalog()
        if "linux-64" in c.platforms
        and c.platforms["linux-64"].route.value in PIP_ROUTES
        and python in c.platforms["linux-64"].pythons
    ]
    return [out[0], out[-1]] if len(out) > 1 else out


def prove(combo: Combo, python: str, work: Path) -> tuple[int, str]:
    route = combo.route("linux-64")
    target = PipTarget(
        requirements=tuple(p.requirement for p in route.pip),
        platform="linux-64",
        python=python,
        glibc=route.glibc or "2.17",
        constraints=combo.constraints_for("linux-64"),
    )
    started = time.perf_counter()
    locked = lock_target(target)
    reqs = work / f"{combo.name}-requirements.txt"
    reqs.write_text(
        "".join(f"{p.name} @ {p.url} --hash=sha256:{p.sha256}\n" for p in locked), encoding="utf-8"
    )
    venv = work / f"{combo.name}-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "--isolated", "--no-deps", "--require-hashes",
         "--no-cache-dir", "--quiet", "-r", str(reqs)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if install.returncode != 0:
        return install.returncode, f"pip install failed:\n{install.stderr[-3000:]}"
    probe = subprocess.run([str(py), "-c", PROBE], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    lines = [
        f"locked {len(locked)} pip packages for {' '.join(p.requirement for p in route.pip[:1])}, "
        f"installed with --no-deps --require-hashes, {seconds:.0f} s in all",
        f"exit status of the import: {probe.returncode}",
        *(f"stdout: {line}" for line in probe.stdout.strip().splitlines()),
        *(f"stderr: {line}" for line in probe.stderr.strip().splitlines()[-6:]),
    ]
    return probe.returncode, "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("combos", nargs="*")
    parser.add_argument("--record", type=Path)
    args = parser.parse_args()
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    catalog = load_catalog()
    combos = [catalog.combo(n) for n in args.combos] or candidates(python)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report = [
        f"## {when}: Python {host.python_version()} on {host.platform()}",
        "",
        f"Command: `python scripts/import-proof.py {' '.join(c.name for c in combos)}`",
        "",
    ]
    status = 0
    with tempfile.TemporaryDirectory(prefix="envfactory-import-proof-") as tmp:
        for combo in combos:
            code, text = prove(combo, python, Path(tmp))
            status = status or code
            report += [f"### {combo.name}", "", "```", text, "```", ""]
            print(f"== {combo.name}\n{text}", flush=True)
    if args.record:
        old = (
            args.record.read_text(encoding="utf-8")
            if args.record.exists()
            else (
                "# Import proof: locked pip closures imported on this machine\n\n"
                "Written by `scripts/import-proof.py --record docs/import-proof.md`,"
                " newest first.\n"
                "\n"
            )
        )
        head, _, rest = old.partition("## ")
        args.record.write_text(
            head + "\n".join(report) + "\n" + ("## " + rest if rest else ""), encoding="utf-8"
        )
    return status


if __name__ == "__main__":
    raise SystemExit(main())
