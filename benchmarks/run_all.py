"""Run every benchmark and print one table of figures, floors and ratios.

    .venv/bin/python benchmarks/run_all.py [--repeat N] [--only NAME ...] [--pass NAME=ARGS]
                                       [--markdown FILE]

Each ``benchmarks/bench_*.py`` that follows the protocol of harness.py (``--repeat``, ``--json``)
runs in its own process and hands back its rows; the others (create, explain, activation: their
figures have their own shapes) run as they are and their output is included verbatim. Scripts
that need a GPU or the network are left out unless named with ``--only`` (the report says
which). With ``--markdown`` the report is also written to that file (docs/benchmarks.md holds
the latest figures).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ENV, PYTHON, machine, table

HERE = Path(__file__).resolve().parent
# Left out unless named with --only: they need what this benchmark run does not assume.
LEFT_OUT = {
    "bench_matmul_tf32": "needs an NVIDIA GPU (docs/device-runs)",
    "bench_pip_resolver": "resolves against the real PyPI index (network)",
}
# Run first: what a user waits for on every command, then the slower set-ups.
ORDER = ["bench_cli", "bench_catalog", "bench_check", "bench_lock", "bench_create"]


def scripts(only: list[str]) -> list[Path]:
    found = sorted(HERE.glob("bench_*.py"))
    rank = {name: i for i, name in enumerate(ORDER)}
    chosen = [
        p
        for p in found
        if (p.stem in only or p.stem[6:] in only) or (not only and p.stem not in LEFT_OUT)
    ]
    return sorted(chosen, key=lambda p: (rank.get(p.stem, len(ORDER)), p.stem))


def follows_protocol(script: Path) -> bool:
    text = script.read_text(encoding="utf-8")
    return "from harness import" in text and "parser(" in text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, help="runs per figure (default: each script's own)")
    ap.add_argument("--only", nargs="*", default=[], help="bench_cli, catalog, check, ...")
    ap.add_argument("--markdown", type=Path, help="also write the report to this file")
    ap.add_argument(
        "--pass",
        dest="extra",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="extra arguments for one script, e.g. 'bench_create=--repeat 2'",
    )
    args = ap.parse_args()

    extra = {k: shlex.split(v) for k, _, v in (e.partition("=") for e in args.extra)}
    sections: list[str] = []
    all_rows: list[dict[str, object]] = []
    started = time.perf_counter()
    chosen = scripts(args.only)
    ran = {p.stem for p in chosen}
    for script in chosen:
        print(f"running {script.name} ...", file=sys.stderr, flush=True)
        begin = time.perf_counter()
        if follows_protocol(script):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "rows.json"
                command = [PYTHON, str(script), "--json", str(out), *extra.get(script.stem, [])]
                if args.repeat:
                    command += ["--repeat", str(args.repeat)]
                done = subprocess.run(command, capture_output=True, text=True, check=False, env=ENV)
                if done.returncode != 0 or not out.is_file():
                    sections.append(
                        f"## {script.name}: failed (exit {done.returncode})\n\n```\n"
                        f"{done.stderr[-3000:]}\n```"
                    )
                    continue
                result = json.loads(out.read_text(encoding="utf-8"))
            rows = result["rows"]
            all_rows.extend(rows)
            notes = "".join(f"\n\n{n}" for n in result["notes"])
            sections.append(f"## {result['title']} ({script.name})\n\n{table(rows)}{notes}")
        else:
            done = subprocess.run(
                [PYTHON, str(script), *extra.get(script.stem, [])],
                capture_output=True,
                text=True,
                check=False,
                env=ENV,
            )
            status = "" if done.returncode == 0 else f" (exit {done.returncode})"
            shown = " ".join([script.name, *extra.get(script.stem, [])])
            sections.append(
                f"## {shown}{status}\n\n```\n{(done.stdout + done.stderr).strip()}\n```"
            )
        print(f"  {time.perf_counter() - begin:.0f} s", file=sys.stderr, flush=True)

    targets = [r for r in all_rows if r.get("target")]
    summary = ["| figure | median | target | |", "| --- | ---: | --- | --- |"]
    for row in targets:
        verdict = "met" if row["meets"] else "NOT met"
        median = float(row["median"])  # type: ignore[arg-type]
        summary.append(
            f"| {row['figure']} | {median * 1000:.0f} ms | {row['target']} | {verdict} |"
        )
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = (
        f"# Benchmarks\n\nGenerated by `python benchmarks/run_all.py"
        f"{' --repeat ' + str(args.repeat) if args.repeat else ''}"
        f"{''.join(' --pass ' + shlex.quote(e) for e in args.extra)}` on {when}: {machine()}; "
        f"{time.perf_counter() - started:.0f} s in all.\n\n"
        "Every figure is min/median/max over repeated runs (whole processes unless marked "
        "in-process), interleaved with its floor measured in the same run; the ratio is median / "
        "floor median, the CPU ratio the same for CPU time (user + system), which other load on "
        "the machine disturbs much less than wall-clock time. Targets are from issue 11 and are "
        "checked against the wall-clock median."
    )
    left_out = [f"{name}.py: {why}" for name, why in LEFT_OUT.items() if name not in ran]
    if left_out:
        sections.append("## Not run here\n\n" + "\n".join(f"* {line}" for line in left_out))
    report = "\n\n".join([header, "## Targets\n\n" + "\n".join(summary), *sections]) + "\n"
    print(report)
    if args.markdown is not None:
        args.markdown.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
