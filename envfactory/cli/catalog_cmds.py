"""Commands of the catalog and render stages: list, show, render."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from envfactory.cli import conventions
from envfactory.cli.output import columns, print_json, stdout_console
from envfactory.errors import EXIT_OK

# Each command imports what it uses when it runs: `--help` and `list` never load jinja2 or the
# render stage (benchmarks/bench_cli.py).

JSON_HELP = "Print machine-readable JSON instead of a table."


def list_combos(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> int:
    """List every combo in the catalog: TensorFlow, CUDA, cuDNN, Python and the platforms covered.

    A '*' marks the default Python. Routes: conda = TensorFlow GPU build from a conda channel;
    conda+pip = conda CUDA libraries + the pip TensorFlow wheel; pip = tensorflow[and-cuda].
    """
    from envfactory.catalog.loader import load_catalog
    from envfactory.catalog.views import summarize

    catalog = load_catalog()
    rows = [summarize(c) for c in catalog]
    if as_json:
        print_json(rows)
        return EXIT_OK
    short = {"conda": "conda", "conda-cuda+pip": "conda+pip", "pip-and-cuda": "pip"}
    table = []
    for row in rows:
        pythons = " ".join(
            f"{p}*" if p == row["python"]["default"] else p for p in row["python"]["allowed"]
        )
        notes = []
        if row["deviation"]:
            notes.append("channel build")
        if row["unconfirmed_pins"]:
            notes.append(f"{row['unconfirmed_pins']} unconfirmed")
        table.append(
            (
                row["name"],
                row["tensorflow"],
                row["cuda"],
                row["cudnn"],
                pythons,
                short.get(row["platforms"].get("linux-64", ""), "-"),
                short.get(row["platforms"].get("win-64", ""), "-"),
                ", ".join(notes),
            )
        )
    header = ("combo", "TF", "CUDA", "cuDNN", "python", "linux-64", "win-64", "notes")
    out = stdout_console()
    for line in columns(header, table):
        out.print(line)
    return EXIT_OK


def show(
    combo: str = typer.Argument(
        ..., help="Combo name, e.g. tf114-cuda100 (see 'envfactory list')."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> int:
    """Show every fact of a combo with its source.

    Versions, pins per platform and Python, minimum drivers, the GPU architectures the build
    carries (SASS and PTX), and which facts are unconfirmed.
    """
    from envfactory.catalog.loader import load_catalog
    from envfactory.catalog.views import describe

    catalog = load_catalog()
    doc = describe(catalog, catalog.combo(combo))
    if as_json:
        print_json(doc)
        return EXIT_OK
    _print_show(doc)
    return EXIT_OK


KIND_TITLES = {
    "declared": "declared by TF",
    "breakage": "known breakage",
    "preference": "lock preference (not a problem for audit)",
}


def _mark(item: dict[str, Any]) -> str:
    flag = "" if item["confirmed"] else "  [UNCONFIRMED]"
    note = f"  ({item['note']})" if item.get("note") else ""
    return f"{flag}  [{', '.join(item['sources'])}]{note}"


def _print_show(doc: dict[str, Any]) -> None:
    out = stdout_console()
    out.print(f"{doc['name']}: {doc['summary']}")
    for key in ("tensorflow", "cuda", "cudnn"):
        out.print(f"  {key:<11} {doc['facts'][key]['value']}{_mark(doc['facts'][key])}")
    py = doc["python"]
    out.print(f"  {'python':<11} {', '.join(py['allowed'])} (default {py['default']})")
    if doc["deviation"]:
        out.print(f"  {'deviation':<11} {doc['deviation']}")
    tk = doc["toolkit"]
    floor = tk["compat_floor"]
    out.print(
        f"  {'toolkit':<11} CUDA {tk['release']}: driver >= {tk['driver']['linux']} (Linux), "
        f">= {tk['driver']['windows']} (Windows)"
        + (f"; minor-version floor {floor['linux']} / {floor['windows']}" if floor else "")
        + f"; sm_{tk['min_sm'].replace('.', '')}..sm_{tk['max_sm'].replace('.', '')}"
        + f"  [{', '.join(tk['sources'])}]"
    )
    targets = doc["targets"]
    out.print(
        f"  {'GPU code':<11} SASS {', '.join(doc['sass'])}; PTX {', '.join(doc['ptx']) or '-'}"
        + ("" if targets["confirmed"] else "  [UNCONFIRMED]")
        + f"  [{', '.join(targets['sources'])}]"
    )
    out.print(f"  {'log level':<11} TF_CPP_MIN_LOG_LEVEL={doc['tf_cpp_min_log_level']}")
    for platform, info in doc["platforms"].items():
        out.print(f"\n{platform}: {info['route_title']}{_mark(info['route_fact'])}")
        out.print(f"  channels    {', '.join(info['channels'])}")
        out.print(f"  python      {', '.join(info['pythons'])}")
        threshold = f"{info['driver_threshold']}: {info['driver_note']}"
        out.print(f"  min driver  {info['min_driver']} ({threshold})")
        if info["sass"] != doc["sass"] or info["ptx"] != doc["ptx"]:
            out.print(f"  GPU code    SASS {', '.join(info['sass'])}; PTX {', '.join(info['ptx'])}")
        out.print(f"  pins (python {py['default']}):")
        for pin in info["pin_details"]:
            out.print(f"    {pin['spec']}{_mark(pin)}")
        for pin in info["pip_details"]:
            out.print(f"    pip: {pin['spec']}{_mark(pin)}")
        default_pins = info["pins_by_python"].get(py["default"])
        others = {
            p: pins
            for p, pins in info["pins_by_python"].items()
            if p != py["default"] and pins != default_pins
        }
        for other, pins in others.items():
            out.print(f"  pins (python {other}): {' '.join(pins)}")
    if doc["constraints"]:
        out.print(
            "\nbounds (conda and pip side; kind: declared by TF's releases, known breakage, or "
            "lock preference; see docs/closures.md)"
        )
        for c in doc["constraints"]:
            out.print(f"  {c['requirement']}  {KIND_TITLES[c['kind']]}{_mark(c)}")
    for platform, info in doc["platforms"].items():
        declared = info.get("declared")
        if declared:
            out.print(
                f"\n{platform}: declared by {declared['distribution']} {declared['version']} "
                f"(python {declared['python']}; {declared['source']})"
            )
            out.print(f"  {', '.join(declared['requirements'])}")
    for platform, gap in doc["uncovered"].items():
        alt = f"; use {gap['alternative']}" if gap["alternative"] else ""
        out.print(f"\n{platform}: not covered: {gap['reason']}{alt}")
    out.print("\nsources")
    for sid, source in doc["sources"].items():
        url = f" <{source['url']}>" if source["url"] else ""
        out.print(f"  {sid}: {source['citation']}{url}")


def render(
    combo: str = typer.Argument(
        ..., help="Combo name, e.g. tf114-cuda100 (see 'envfactory list')."
    ),
    platform: list[str] = conventions.platform_option(
        "Render only this platform (linux-64, win-64); repeat for several. Default: all the "
        "combo covers. -p still works (deprecated: in conda -p is the prefix)."
    ),
    old_platform: list[str] = conventions.old_platform_option(),
    python: str | None = typer.Option(
        None, "--python", help="Python X.Y within the combo's range. Default: the combo's default."
    ),
    out: str = typer.Option(
        "locks",
        "--out",
        "-o",
        help="Directory that receives COMBO/ with the files, or '-' to print the environment "
        "file(s) to stdout.",
    ),
) -> int:
    """Render a combo into conda environment files, a virtual-package file and activation scripts.

    Writes OUT/COMBO/environment.yml, or environment.<platform>.yml when the platforms' pins
    differ (each usable as it is with 'conda env create -f' on that platform),
    virtual-packages.yml for 'conda-lock --virtual-package-spec', and
    activation/<platform>/etc/conda/... (copy etc/ into an environment made with plain conda or
    micromamba). Same input, same bytes.
    """
    from envfactory.catalog.loader import load_catalog
    from envfactory.catalog.model import parse_platform
    from envfactory.fsio import write_rendered
    from envfactory.render.environment import render_combo

    catalog = load_catalog()
    selected = [parse_platform(p) for p in conventions.platforms(platform, old_platform)]
    chosen = catalog.combo(combo)
    files = render_combo(chosen, platforms=selected or None, python=python)
    if out == "-":
        envs = [f for f in files if f.relpath.startswith("environment")]
        for index, file in enumerate(envs):
            if len(envs) > 1:
                sys.stdout.write(("---\n" if index else "") + f"# file: {file.relpath}\n")
            sys.stdout.write(file.content)
        sys.stdout.flush()
        return EXIT_OK
    directory = Path(out) / chosen.name
    for path in write_rendered(files, directory):
        sys.stdout.write(f"wrote {path}\n")
    return EXIT_OK


def register(app: typer.Typer) -> None:
    """Add list, show and render to the app."""
    app.command("list")(list_combos)
    app.command("show")(show)
    app.command("render")(render)
