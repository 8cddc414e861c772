"""Commands of the lock stage: lock, create, verify."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import typer

from envfactory.catalog import Platform, load_catalog, parse_platform
from envfactory.cli.output import note, print_json, stdout_console
from envfactory.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_PROBLEMS_FOUND, UserInputError

JSON_HELP = "Print machine-readable JSON instead of text."
COMBO_HELP = "Combo name, e.g. tf114-cuda100 (see 'envfactory list')."


def _progress(message: str) -> None:
    note(f"  {message}")


def lock(
    combo: str = typer.Argument(..., help=COMBO_HELP),
    platform: list[str] = typer.Option(
        [],
        "--platform",
        "-p",
        help="Lock only this platform (linux-64, win-64); repeat for several. Default: all the "
        "combo covers.",
    ),
    python: str | None = typer.Option(
        None, "--python", help="Python X.Y within the combo's range. Default: the combo's default."
    ),
    channel_map: list[str] = typer.Option(
        [],
        "--channel-map",
        help="NAME=URL: fetch channel NAME from URL or a local directory, e.g. "
        "defaults=file:///srv/mirror/main. Repeatable. Also read from [channels] in "
        "./envfactory.toml and from ENVFACTORY_CHANNEL_MAP (NAME=URL,NAME=URL).",
    ),
    solver: str = typer.Option(
        "rattler",
        "--solver",
        help="rattler (in-process, the default) or conda-lock (runs 'conda-lock lock' with your "
        "conda, mamba or micromamba).",
    ),
    check: bool = typer.Option(
        False,
        "--check",
        help="Do not solve: exit 0 when the lock matches the current inputs, 1 with the reason "
        "when it is stale.",
    ),
    virtual_package_spec: Path | None = typer.Option(
        None,
        "--virtual-package-spec",
        help="A conda-lock virtual-package file (subdirs: PLATFORM: packages: NAME: VERSION) "
        "that replaces the combo's own assumptions.",
    ),
    pip_index: str | None = typer.Option(
        None,
        "--pip-index",
        help="Where pip wheels are resolved: a folder of wheels or an index URL. Default: PyPI.",
    ),
    out: Path = typer.Option(
        Path("locks"), "--out", "-o", help="Directory that receives COMBO/ with the lock files."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> int:
    """Solve a combo into locks/COMBO/conda-lock.yml and one explicit file per platform.

    Each platform is solved with the combo's virtual packages (__cuda = its CUDA, __glibc,
    __unix/__win), never this machine's. The solution is refused (exit 2) when it holds a CPU
    TensorFlow build, or a cudatoolkit, cudnn, python or numpy outside the combo's pins, or a
    package whose dependencies are not all in the lock. Same inputs, same bytes.
    """
    from envfactory.channels import load_channel_map
    from envfactory.lock import SOLVERS, LockRequest, check_lock, lock_combo, read_virtual_spec

    if solver not in SOLVERS:
        raise UserInputError(f"unknown solver '{solver}'", f"use one of: {', '.join(SOLVERS)}")
    chosen = load_catalog().combo(combo)
    request = LockRequest.for_combo(
        chosen,
        [parse_platform(p) for p in platform],
        python,
        load_channel_map(channel_map),
        solver=cast("Any", solver),
        virtual_packages=read_virtual_spec(virtual_package_spec) if virtual_package_spec else None,
        pip_index=pip_index,
    )
    directory = out / chosen.name
    if check:
        result = check_lock(request, directory)
        if as_json:
            print_json({"fresh": result.fresh, "reasons": list(result.reasons)})
        elif result.fresh:
            stdout_console().print(f"{directory / 'conda-lock.yml'} is up to date")
        else:
            stdout_console().print(f"{directory / 'conda-lock.yml'} is stale:")
            for reason in result.reasons:
                stdout_console().print(f"  {reason}")
            stdout_console().print(f"regenerate: {request.regenerate()}")
        return EXIT_OK if result.fresh else EXIT_BAD_INPUT
    note(f"locking {chosen.name} for {', '.join(request.platforms)} (python {request.python})")
    result_lock = lock_combo(request, directory, progress=None if as_json else _progress)
    if as_json:
        print_json(
            {
                "directory": str(directory),
                "files": [str(p) for p in result_lock.files],
                "platforms": {
                    p: {
                        "conda": sum(1 for x in pkgs if x.manager == "conda"),
                        "pip": sum(1 for x in pkgs if x.manager == "pip"),
                        "seconds": round(result_lock.solve_seconds[p], 3),
                    }
                    for p, pkgs in result_lock.packages.items()
                },
            }
        )
        return EXIT_OK
    console = stdout_console()
    for p, pkgs in result_lock.packages.items():
        conda = sum(1 for x in pkgs if x.manager == "conda")
        pip = len(pkgs) - conda
        console.print(
            f"{p}: {conda} conda + {pip} pip packages in {result_lock.solve_seconds[p]:.2f} s"
        )
    for path in result_lock.files:
        console.print(f"wrote {path}")
    return EXIT_OK


def _named_prefix(name: str) -> Path:
    """``-n NAME``: the first directory of CONDA_ENVS_PATH, else ~/.conda/envs (where conda
    looks for named environments too)."""
    envs = os.environ.get("CONDA_ENVS_PATH", "").split(os.pathsep)[0]
    base = Path(envs) if envs else Path.home() / ".conda" / "envs"
    return base / name


def create(
    target: str = typer.Argument(
        ..., help="A combo name (uses locks/COMBO/conda-lock.yml) or a conda-lock.yml path."
    ),
    prefix: Path | None = typer.Option(None, "--prefix", "-p", help="Create the env here."),
    name: str | None = typer.Option(
        None, "--name", "-n", help="Create the env under CONDA_ENVS_PATH or ~/.conda/envs."
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing non-empty prefix."),
    platform: str | None = typer.Option(
        None,
        "--platform",
        help="Lay out the env for this platform (default: this machine's).",
    ),
    locks_dir: Path = typer.Option(
        Path("locks"), "--locks", help="Where COMBO/conda-lock.yml is looked up."
    ),
) -> int:
    """Create an environment with exactly the locked packages for this platform.

    Every package file is checked against the lock's sha256 (or md5) first, file:// ones
    included. The env is built in a directory next to PREFIX and moved into place, so a failure
    or an interrupt leaves nothing behind.
    """
    from envfactory.create import create_environment, resolve_lock

    if (prefix is None) == (name is None):
        raise UserInputError("give exactly one of -p PREFIX and -n NAME", "e.g. -p ./envs/tf114")
    where = prefix if prefix is not None else _named_prefix(cast(str, name))
    lock_path = resolve_lock(target, locks_dir)
    chosen: Platform | None = parse_platform(platform) if platform else None
    note(f"creating {where} from {lock_path}")
    result = create_environment(lock_path, where, force, chosen, progress=_progress)
    console = stdout_console()
    console.print(
        f"created {result.prefix} ({result.platform}): {result.conda} conda + "
        f"{result.pip} pip packages"
    )
    for path in result.activation:
        console.print(f"activation script {path}")
    if result.activation_note:
        note(f"note: {result.activation_note}")
    return EXIT_OK


def verify(
    prefix: Path = typer.Argument(..., help="The environment's prefix."),
    lock_file: Path | None = typer.Option(
        None, "--lock", help="The lock to compare with (default: the one that created PREFIX)."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> int:
    """Compare an environment with its lock: missing, extra and different packages.

    Exit 0 only when they are identical, 3 otherwise.
    """
    from envfactory.verify import verify_environment

    report = verify_environment(prefix, lock_file)
    if as_json:
        print_json(
            {
                "prefix": str(report.prefix),
                "lock": str(report.lock),
                "platform": report.platform,
                "identical": report.identical,
                "missing": [p.describe() for p in report.missing],
                "extra": [p.describe() for p in report.extra],
                "different": [
                    {"name": d.name, "locked": d.locked, "installed": d.installed}
                    for d in report.different
                ],
            }
        )
    else:
        console = stdout_console()
        if report.identical:
            console.print(
                f"{report.prefix} is identical to {report.lock} "
                f"({report.checked} packages, {report.platform})"
            )
        else:
            console.print(f"{report.prefix} differs from {report.lock} ({report.platform}):")
            for pkg in report.missing:
                console.print(f"  missing    {pkg.describe()}")
            for inst in report.extra:
                console.print(f"  extra      {inst.describe()}")
            for diff in report.different:
                console.print(
                    f"  different  {diff.name}: locked {diff.locked}, has {diff.installed}"
                )
    return EXIT_OK if report.identical else EXIT_PROBLEMS_FOUND


def register(app: typer.Typer) -> None:
    """Add lock, create and verify to the app."""
    app.command("lock")(lock)
    app.command("create")(create)
    app.command("verify")(verify)
