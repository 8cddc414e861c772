"""Benchmark: what a user waits for on every command -- whole ``envfactory`` processes against a
bare ``python -c pass`` started the same way, interleaved in one run.

    .venv/bin/python benchmarks/bench_cli.py [--repeat N] [--json PATH]

Targets (issue 11): render, list, show, compat and explain <= 0.15 s each and <= 15x
``python -c pass``. ``--help`` and ``--version`` are shown for reference. ``render`` writes into a
fresh temporary directory each run (the files, the activation scripts, the atomic renames);
``explain`` reads a 12-line TensorFlow log on stdin (the large-log figures are the explain
benchmark's). A second table shows what each command imports (``python -X importtime``, summed
self time by top-level package, one run), so a regression names its cause.
"""

from __future__ import annotations

import functools
import itertools
import re
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

from harness import (
    ENV,
    ENVFACTORY,
    FLOOR_PASS,
    PYTHON,
    Row,
    Target,
    paired,
    parser,
    process,
    report,
)

TARGET = Target(seconds=0.15, ratio=15)

LOG = b"""\
2019-07-01 10:00:00.000000: I tensorflow/stream_executor/platform/default/dso_loader.cc:42] \
Successfully opened dynamic library libcudart.so.10.0
2019-07-01 10:00:01.000000: W tensorflow/stream_executor/platform/default/dso_loader.cc:55] \
Could not load dynamic library 'libcudnn.so.7'; dlerror: libcudnn.so.7: cannot open shared \
object file: No such file or directory
2019-07-01 10:00:01.000001: W tensorflow/core/common_runtime/gpu/gpu_device.cc:1641] Cannot \
dlopen some GPU libraries. Skipping registering GPU devices...
""" + b"".join(
    b"2019-07-01 10:00:02.%06d: I tensorflow/core/platform/cpu_feature_guard.cc:142] line %d\n"
    % (i, i)
    for i in range(9)
)

# (figure, arguments, stdin, accepted exit codes, target)
COMMANDS: list[tuple[str, list[str], bytes | None, tuple[int, ...], Target | None]] = [
    ("envfactory --version", ["--version"], None, (0,), None),
    ("envfactory --help", ["--help"], None, (0,), None),
    ("envfactory list", ["list"], None, (0,), TARGET),
    ("envfactory list --json", ["list", "--json"], None, (0,), TARGET),
    ("envfactory show tf114-cuda100", ["show", "tf114-cuda100"], None, (0,), TARGET),
    ("envfactory render tf114-cuda100 -o DIR", ["render", "tf114-cuda100"], None, (0,), TARGET),
    (
        "envfactory compat tf114-cuda100 --gpu 'RTX 2080' --driver 450.80.02",
        ["compat", "tf114-cuda100", "--gpu", "RTX 2080", "--driver", "450.80.02"],
        None,
        (0,),
        TARGET,
    ),
    ("envfactory explain - (12-line log)", ["explain", "-"], LOG, (0, 3), TARGET),
]


def import_profile(args: list[str], stdin: bytes | None, out: Path) -> dict[str, float]:
    """Self import time in ms per top-level package of one ``envfactory ARGS`` process."""
    code = "import sys; from envfactory.cli import run; sys.exit(run(sys.argv[1:]))"
    done = subprocess.run(
        [PYTHON, "-X", "importtime", "-c", code, *args],
        input=stdin,
        capture_output=True,
        check=False,
        cwd=out,
        env=ENV,
    )
    totals: dict[str, float] = defaultdict(float)
    for line in done.stderr.decode(errors="replace").splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|(\s*)(\S+)", line)
        if match:
            totals[match[3].split(".")[0]] += int(match[1]) / 1000
    return dict(totals)


def render_fresh(argv: list[str], out: Path, counter: Iterator[int]) -> None:
    """``envfactory render`` into a directory that does not exist yet."""
    process([ENVFACTORY, *argv, "-o", str(out / f"render-{next(counter)}")])()


def main() -> None:
    args = parser(__doc__.splitlines()[0], repeat=15).parse_args()
    floor = process([PYTHON, "-c", "pass"])
    rows: list[Row] = []
    profiles: list[str] = []
    with tempfile.TemporaryDirectory(prefix="envfactory-bench-") as tmp:
        out = Path(tmp)
        for figure, argv, stdin, codes, target in COMMANDS:
            action: Callable[[], None]
            if argv[0] == "render":
                action = functools.partial(render_fresh, argv, out, itertools.count())
            else:
                action = process([ENVFACTORY, *argv], cwd=out, stdin=stdin, ok_codes=codes)
            times, floor_times = paired(action, floor, args.repeat)
            rows.append(Row(figure, times, FLOOR_PASS, floor_times, target))
            argv_full = [*argv, "-o", str(out / "render-profile")] if argv[0] == "render" else argv
            imports = import_profile(argv_full, stdin, out)
            heavy = sorted(imports.items(), key=lambda kv: -kv[1])[:6]
            profiles.append(
                f"{figure}: imports {sum(imports.values()):.0f} ms -- "
                + ", ".join(f"{name} {ms:.0f}" for name, ms in heavy)
            )
    report(
        "CLI start-up (whole processes)",
        rows,
        args,
        notes=["Import time by package (ms, one run):", *profiles],
    )


if __name__ == "__main__":
    main()
