"""Commands that check hardware, environments and logs: audit, compat, doctor, explain, recommend.

Exit codes: 0 ok (the combo runs; nothing wrong found), 1 bad input, 3 problems found (compat:
the combo does not run there; doctor, audit: a problem finding; explain: a recognized problem;
recommend: no combo runs there).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from envfactory.cli import conventions
from envfactory.cli.output import print_json, stdout_console
from envfactory.errors import EXIT_OK, EXIT_PROBLEMS_FOUND, UserInputError

if TYPE_CHECKING:  # each command imports what it uses when it runs (bench_cli.py)
    from envfactory.diagnose.compat import DriverVersion, GpuSpec

JSON_HELP = "Print machine-readable JSON instead of text."
GPU_HELP = "GPU model, e.g. 'RTX 3080', 'NVIDIA H200' (matched tolerantly)."
CC_HELP = "Compute capability instead of a name, e.g. 8.6."
DRIVER_HELP = "NVIDIA driver version as nvidia-smi prints it, e.g. 535.104.05."


def _gpu_spec(gpu: str | None, cc: str | None) -> tuple[GpuSpec, str | None]:
    from envfactory.catalog.gpus import parse_capability, resolve_gpu
    from envfactory.diagnose.compat import GpuSpec

    if gpu and cc:
        raise UserInputError("give --gpu or --cc, not both")
    if cc:
        return GpuSpec(parse_capability(cc)), None
    if gpu:
        match = resolve_gpu(gpu)
        return GpuSpec(match.model.cc, match.model.name), match.note
    raise UserInputError("no GPU given", "give --gpu NAME or --cc X.Y")


def _driver(text: str | None) -> DriverVersion | None:
    from envfactory.diagnose.compat import parse_driver

    return parse_driver(text) if text else None


def compat(
    combo: str = typer.Argument(..., help="Combo name, e.g. tf114-cuda100."),
    gpu: str | None = typer.Option(None, "--gpu", help=GPU_HELP),
    cc: str | None = typer.Option(None, "--cc", help=CC_HELP),
    driver: str | None = typer.Option(None, "--driver", help=DRIVER_HELP),
    platform: str | None = typer.Option(
        None, *conventions.PLATFORM_NAMES, help="linux-64 or win-64; defaults to this machine's."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> int:
    """Will COMBO run on this GPU and driver? Probes nothing.

    Verdicts, checked in this order: platform-unsupported, driver-too-old, gpu-too-new,
    gpu-too-old, supported (native SASS), ptx-jit (runs after JIT compilation). Exit 0 when it
    runs (supported or ptx-jit), 3 when it does not.
    """
    from envfactory.catalog.loader import load_catalog
    from envfactory.catalog.model import host_platform, parse_platform
    from envfactory.diagnose.compat import check

    catalog = load_catalog()
    spec, note = _gpu_spec(gpu, cc)
    plat = parse_platform(platform) if platform else host_platform()
    result = check(catalog, catalog.combo(combo), spec, plat, _driver(driver))
    if as_json:
        data = result.to_json()
        data["gpu"]["match_note"] = note
        print_json(data)
    else:
        out = stdout_console()
        if note:
            out.print(f"note: {note}")
        out.print(f"{result.combo} on {spec.describe()}, {result.platform}: {result.verdict}")
        for reason in result.reasons:
            out.print(f"  - {reason}")
        if result.fix:
            out.print(f"fix: {result.fix.text}")
    return EXIT_OK if result.runnable else EXIT_PROBLEMS_FOUND


def doctor(
    combo: str | None = typer.Argument(None, help="Combo to check this machine against."),
    prefix: Path | None = conventions.prefix_option(
        "An environment to test: its own python runs the TensorFlow check."
    ),
    name: str | None = conventions.name_option(
        "The environment NAME in the envs directories, instead of -p PREFIX."
    ),
    platform: str | None = typer.Option(
        None, *conventions.PLATFORM_NAMES, help="Defaults to this machine's platform."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> int:
    """Check this machine: GPUs and driver (NVML, nvidia-smi), each GPU against COMBO, which copy
    of each CUDA/cuDNN library would load (and which are shadowed), foreign CUDA directories on
    PATH/LD_LIBRARY_PATH, and with --prefix TensorFlow itself (built with CUDA; GPU devices; a
    real matmul on /GPU:0). Exit 3 when it found problems."""
    from envfactory.catalog.loader import load_catalog
    from envfactory.catalog.model import host_platform, os_of, parse_platform
    from envfactory.diagnose import doctor as doctor_core
    from envfactory.diagnose.nvml import detect
    from envfactory.diagnose.probes import LiveProbes

    catalog = load_catalog()
    plat = parse_platform(platform) if platform else host_platform()
    chosen = catalog.combo(combo) if combo else None
    prefix = conventions.existing_environment(prefix, name)
    if prefix is not None and not prefix.is_dir():
        raise UserInputError(f"--prefix {prefix} is not a directory")
    report = doctor_core.diagnose(catalog, chosen, plat, detect(), LiveProbes(os_of(plat)), prefix)
    if as_json:
        print_json(report.to_json())
    else:
        out = stdout_console()
        for f in report.findings:
            out.print(f"{f.severity}: [{f.id}] {f.message}")
            if f.fix:
                out.print(f"    fix: {f.fix}")
        out.print(f"{report.problems} problem(s)")
    return EXIT_PROBLEMS_FOUND if report.problems else EXIT_OK


def audit(
    target: Path = typer.Argument(
        ...,
        help="An environment.yml / conda env export, conda list (--explicit, --export) output, a "
        "conda-lock.yml, a pip freeze, or an environment's directory.",
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> int:
    """Check an environment you already have: a CPU TensorFlow next to CUDA packages,
    TensorFlow/estimator/tensorboard/keras out of step, numpy/protobuf/h5py outside the companion
    constraints, a CUDA that is not the one the TensorFlow build needs, Python outside the
    release's range, CUDA libraries from several channels, a pip TensorFlow over a conda one. Names
    the closest catalog combo and prints the envfactory.yaml entry that rebuilds it. Reads files
    only; runs nothing. Exit 3 when it found problems."""
    from envfactory.catalog.loader import load_catalog
    from envfactory.diagnose.audit import audit_path

    if not target.exists():
        raise UserInputError(f"{target} does not exist")
    reports = audit_path(load_catalog(), target)
    if as_json:
        print_json({"environments": [r.to_json() for r in reports]})
    else:
        out = stdout_console()
        for r in reports:
            inv = r.inventory
            out.print(
                f"{inv.source} ({inv.kind}, {inv.platform or 'platform unknown'}, "
                f"{len(inv.packages)} packages, TensorFlow {r.tensorflow or 'not found'})"
            )
            for f in r.findings:
                out.print(f"  {f.severity}: [{f.id}] {f.message}")
                out.print(f"    cause: {f.cause}")
                out.print(f"    fix: {f.fix}")
            verdict = f"unknown: not checked ({r.unchecked})" if r.unchecked else r.verdict
            if r.verdict == "inconsistent":
                verdict = r.verdict
            out.print(f"  TensorFlow verdict: {verdict}")
            if r.closest:
                out.print(f"  closest combo: {r.closest} ({r.closest_why})")
                out.print("  envfactory.yaml entry that rebuilds it:")
                for line in (r.manifest or "").splitlines():
                    out.print(f"    {line}")
    return EXIT_PROBLEMS_FOUND if any(r.problems for r in reports) else EXIT_OK


def explain(
    source: str = typer.Argument("-", help="A log file, or - for standard input."),
    encoding: str = typer.Option(
        "utf-8", "--encoding", help="The log's encoding (a byte-order mark wins), e.g. cp1252."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> int:
    """Recognize known TensorFlow/CUDA problems in a pasted log: each with its id, the matching
    lines, the cause and the fix. The log is read as a stream (any size, bounded memory).
    Findings marked 'note' are expected on a machine without a GPU. Exit 3 when it recognized a
    problem, 0 when it found nothing or only notes."""
    from envfactory.diagnose.explain import explain_lines, read_lines

    if source == "-":
        if sys.stdin.isatty():  # a bare 'explain' in a terminal would wait without a word
            end = "Ctrl-Z then Enter" if sys.platform.startswith("win") else "Ctrl-D"
            sys.stderr.write(
                f"paste the log here, then press {end} on an empty line to end it "
                "(or pass a file: envfactory explain FILE)\n"
            )
            sys.stderr.flush()
        result = explain_lines(read_lines(sys.stdin.buffer, encoding, "standard input"))
    else:
        try:
            with Path(source).open("rb") as stream:
                result = explain_lines(read_lines(stream, encoding, source))
        except OSError as exc:
            raise UserInputError(f"cannot read {source}: {exc.strerror}") from None
    if as_json:
        print_json(result.to_json())
    else:
        out = stdout_console()
        if not result.problems:
            out.print("no known problem recognized")
        for p in result.problems:
            tag = f"{p.id}, note" if p.severity == "note" else p.id
            out.print(f"[{tag}] {p.cause}")
            for line in p.lines:
                out.print(f"    > {line}")
            out.print(f"  fix: {p.fix}")
    return EXIT_PROBLEMS_FOUND if result.has_problems else EXIT_OK


def recommend(
    gpu: str | None = typer.Option(None, "--gpu", help=GPU_HELP),
    cc: str | None = typer.Option(None, "--cc", help=CC_HELP),
    driver: str | None = typer.Option(None, "--driver", help=DRIVER_HELP),
    platform: str | None = typer.Option(
        None, *conventions.PLATFORM_NAMES, help="Defaults to this machine's."
    ),
    tf: str | None = typer.Option(
        None, "--tf", help="Only TF 1, TF 2, or one series such as 2.15."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> int:
    """The combos that run on this hardware, best first, each with why. The order: native
    kernels before PTX JIT; then fewer unconfirmed catalog facts (pins or GPU code lists not
    seen in a source, shown as 'N unconfirmed'; see 'envfactory show COMBO'); then newest
    TensorFlow. Without --gpu/--cc it uses the GPUs this machine reports
    (and their driver, unless --driver is given). Exit 3 when none runs there."""
    from envfactory.catalog.loader import load_catalog
    from envfactory.catalog.model import host_platform, parse_platform
    from envfactory.diagnose.compat import GpuSpec, parse_driver
    from envfactory.diagnose.nvml import detect
    from envfactory.diagnose.recommend import parse_tf_filter
    from envfactory.diagnose.recommend import recommend as recommend_core

    catalog = load_catalog()
    plat = parse_platform(platform) if platform else host_platform()
    driver_v = _driver(driver)
    if gpu or cc:
        specs = [_gpu_spec(gpu, cc)[0]]
    else:
        machine = detect()
        specs = [GpuSpec(g.cc, g.name) for g in machine.gpus if g.cc is not None]
        if not specs:
            why = "; ".join(machine.problems) or "the driver reports no GPU"
            raise UserInputError(f"no GPU detected ({why})", "give --gpu NAME or --cc X.Y")
        if driver_v is None and machine.driver:
            driver_v = parse_driver(machine.driver)
    result = recommend_core(catalog, specs, plat, driver_v, parse_tf_filter(tf) if tf else None)
    if as_json:
        print_json(result.to_json())
    else:
        out = stdout_console()
        gpus = ", ".join(g.describe() for g in result.gpus)
        out.print(
            f"combos that run on {gpus}, {plat}" + (f", driver {driver_v}" if driver_v else "")
        )
        for note in result.notes:
            out.print(f"note: {note}")
        if not result.candidates:
            out.print("  none")
        for c in result.to_json()["combos"]:
            doubt = f" ({c['unconfirmed']} unconfirmed)" if c["unconfirmed"] else ""
            out.print(f"{c['combo']}: {c['verdict']}{doubt}")
            for why in c["why"]:
                out.print(f"  - {why}")
    return EXIT_OK if result.candidates else EXIT_PROBLEMS_FOUND


def register(app: typer.Typer) -> None:
    """Add audit, compat, doctor, explain and recommend to the app."""
    app.command("audit")(audit)
    app.command("compat")(compat)
    app.command("doctor")(doctor)
    app.command("explain")(explain)
    app.command("recommend")(recommend)
