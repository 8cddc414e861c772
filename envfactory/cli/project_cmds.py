"""Commands around a project's environments: mirror (an offline channel of a lock) and kernel
(a Jupyter kernel that carries an environment's activation)."""

from __future__ import annotations

from pathlib import Path

import typer

from envfactory.cli import conventions
from envfactory.cli.output import choose, note, print_json, stdout_console, warn
from envfactory.errors import EXIT_OK

PROJECT_HELP = "The project file (default: ./envfactory.yaml when there is one)."


def _progress(message: str) -> None:
    note(f"  {message}")


def mirror(
    target: str = typer.Argument(
        ..., help="A project environment, a combo (locks/COMBO/) or a conda-lock.yml path."
    ),
    directory: Path = typer.Argument(..., help="The local channel to write (created if needed)."),
    platform: list[str] = conventions.platform_option(
        "Mirror only this platform; repeatable. Default: all. -p still works (deprecated: in "
        "conda -p is the prefix)."
    ),
    old_platform: list[str] = conventions.old_platform_option(),
    project_file: Path | None = typer.Option(None, "--project", help=PROJECT_HELP),
    locks_dir: Path | None = typer.Option(
        None, "--locks", help="Where NAME/conda-lock.yml is looked up."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
    quiet: bool = conventions.quiet_option(),
    verbose: int = conventions.verbose_option(),
) -> int:
    """Download exactly the locked packages into DIRECTORY as an indexed local channel.

    Each file is hash-checked against the lock before it gets its final name; an interrupted
    download is resumed on the next run. Then, on a machine with no other channel:
    envfactory create ENV --channel-map NAME=file://DIRECTORY --pip-index DIRECTORY/wheels
    """
    from envfactory.catalog.model import parse_platform
    from envfactory.cli.transfer import transfer_display
    from envfactory.install.mirror import mirror_lock
    from envfactory.project.targets import lock_target

    conventions.set_verbosity(quiet, verbose)
    platform = conventions.platforms(platform, old_platform)
    lock_path = lock_target(target, project_file=project_file, locks_dir=locks_dir).lock
    note(f"mirroring {lock_path} into {directory}")
    bar = transfer_display("files")
    try:
        result = mirror_lock(
            lock_path,
            directory,
            platforms=[parse_platform(p) for p in platform],
            progress=None if as_json else _progress,
            transfer=None if as_json else bar,
        )
    finally:
        bar.stop()
    command = result.create_command(target)
    if as_json:
        print_json(
            {
                "directory": str(result.directory),
                "lock": str(result.lock),
                "platforms": list(result.platforms),
                "files": result.outcomes,
                "create": command,
            }
        )
        return EXIT_OK
    console = stdout_console()
    counts = ", ".join(
        f"{result.count(o)} {o}" for o in ("downloaded", "resumed", "copied", "kept")
    )
    console.print(f"mirrored {len(result.outcomes)} files into {result.directory} ({counts})")
    console.print(f"create from it: {command}")
    return EXIT_OK


def kernel(
    target: str = typer.Argument(
        ..., help="A project environment (its prefix envs/ENV) or an environment's prefix."
    ),
    prefix: Path | None = typer.Option(
        None, "--prefix", "-p", help="The environment's prefix (default: from the project)."
    ),
    where: str = typer.Option(
        "user",
        "--target",
        metavar="[user|env]",
        help="user: the user's Jupyter data directory (every Jupyter sees it); env: "
        "<prefix>/share/jupyter/kernels (a Jupyter running from that environment sees it).",
    ),
    name: str | None = typer.Option(None, "--name", help="Kernel name (default envfactory-ENV)."),
    display_name: str | None = typer.Option(None, "--display-name", help="Shown in Jupyter."),
    project_file: Path | None = typer.Option(None, "--project", help=PROJECT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the kernel.json written."),
    replace: bool = typer.Option(
        False,
        "--replace",
        help="Overwrite a kernel of that name that envfactory did not write for this prefix.",
    ),
) -> int:
    """Register a Jupyter kernel whose kernel.json carries the environment's activation:
    PATH, LD_LIBRARY_PATH, CUDA_PATH and TF_CPP_MIN_LOG_LEVEL as the activate.d scripts set
    them (Jupyter does not run those scripts for kernels)."""
    from envfactory.install.kernel import TARGETS, install_kernel
    from envfactory.project.targets import prefix_target

    target_dir = choose(where, TARGETS, "--target")
    chosen = prefix if prefix is not None else prefix_target(target, project_file=project_file)
    result = install_kernel(
        chosen, target=target_dir, name=name, display_name=display_name, replace=replace
    )
    if as_json:
        print_json({"name": result.name, "path": str(result.path), "kernel": result.spec})
    else:
        stdout_console().print(f"registered kernel {result.name}: {result.path}")
    for text in result.notes:
        warn(f"note: {text}")
    return EXIT_OK


def register(app: typer.Typer) -> None:
    """Add mirror and kernel to the app."""
    app.command("mirror")(mirror)
    app.command("kernel")(kernel)
