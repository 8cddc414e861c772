"""Commands of the lock stage: lock, create, verify; for combos and project environments."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import typer

from envfactory.cli import conventions
from envfactory.cli.output import (
    choose,
    detail,
    note,
    print_json,
    stdout_console,
    warn,
    write_lines,
)
from envfactory.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_PROBLEMS_FOUND, UserInputError

if TYPE_CHECKING:  # each command imports what it uses when it runs
    from envfactory.catalog.platforms import Platform
    from envfactory.lockfile.diff import LockDiff
    from envfactory.solve.channels import ChannelMap
    from envfactory.solve.lock import LockRequest

JSON_HELP = "Print machine-readable JSON instead of text."
COMBO_HELP = "Combo name, e.g. tf114-cuda100 (see 'envfactory list')."


def _progress(message: str) -> None:
    note(f"  {message}")


PROJECT_HELP = "The project file (default: ./envfactory.yaml when there is one)."


class _Target(NamedTuple):
    """One lock to make or check: a project environment or a combo, and where it lives."""

    request: LockRequest
    directory: Path
    kind: str  # "project environment" or "combo"

    @property
    def label(self) -> str:
        if self.kind == "combo":
            return f"{self.request.name} (combo)"
        return f"{self.request.name} (project environment, combo {self.request.combo.name})"


def _lock_targets(
    target: str | None,
    project_file: Path | None,
    platform: list[str],
    python: str | None,
    channel_map: list[str],
    solver: str,
    virtual_package_spec: Path | None,
    pip_index: str | None,
    out: Path | None,
) -> list[_Target]:
    """``lock`` = every environment of the project; ``lock NAME`` = the project environment
    NAME if the project defines one, else the combo NAME."""
    from envfactory.catalog.loader import load_catalog
    from envfactory.catalog.platforms import parse_platform
    from envfactory.project.manifest import PROJECT_FILE, find_project, lock_request
    from envfactory.solve.channels import CONFIG_FILE, load_channel_map
    from envfactory.solve.lock import SOLVERS, LockRequest, read_virtual_spec

    kind = choose(solver, SOLVERS, "--solver")
    project = find_project(project_file)
    if target is None and project is None:
        raise UserInputError(
            f"no {PROJECT_FILE} in {Path.cwd()}, so there is no project to lock",
            "run in a project directory, pass --project FILE, or name a combo: "
            "envfactory lock COMBO (see 'envfactory list')",
        )
    if project is not None and (target is None or target in project.environments):
        if platform or python or virtual_package_spec:
            raise UserInputError(
                "--platform, --python and --virtual-package-spec apply to combos; a project "
                "environment takes its platforms and python from " + str(project.path),
                "set 'platforms:' and 'python:' of the environment in the project file",
            )
        cmap = load_channel_map(channel_map, config=project.directory / CONFIG_FILE)
        envs = list(project) if target is None else [project.environment(target)]
        base = out if out is not None else project.locks_dir
        return [
            _Target(
                lock_request(env, cmap, kind, pip_index), base / env.name, "project environment"
            )
            for env in envs
        ]
    assert target is not None
    chosen = load_catalog().combo(target)
    request = LockRequest.for_combo(
        chosen,
        platforms=[parse_platform(p) for p in platform],
        python=python,
        channel_map=load_channel_map(channel_map),
        solver=kind,
        virtual_packages=read_virtual_spec(virtual_package_spec) if virtual_package_spec else None,
        pip_index=pip_index,
    )
    return [_Target(request, (out or Path("locks")) / chosen.name, "combo")]


def lock(
    target: str | None = typer.Argument(
        None,
        help="A project environment (from envfactory.yaml) or a combo, e.g. tf114-cuda100 (see "
        "'envfactory list'). Default: every environment of the project.",
        show_default=False,
    ),
    project_file: Path | None = typer.Option(None, "--project", "-f", "--file", help=PROJECT_HELP),
    platform: list[str] = conventions.platform_option(
        "Lock only this platform (linux-64, win-64); repeat for several. Default: all the "
        "combo covers. Combos only (a project environment has 'platforms:'). -p still works "
        "(deprecated: in conda -p is the prefix)."
    ),
    old_platform: list[str] = conventions.old_platform_option(),
    python: str | None = typer.Option(
        None, "--python", help="Python X.Y within the combo's range. Default: the combo's default."
    ),
    channel_map: list[str] = typer.Option(
        [],
        "--channel-map",
        help="NAME=URL: fetch channel NAME from URL or a local directory, e.g. "
        "defaults=file:///srv/mirror/main. Repeatable. Also read from [channels] in "
        "envfactory.toml (next to envfactory.yaml, else ./) and from ENVFACTORY_CHANNEL_MAP "
        "(NAME=URL,NAME=URL).",
    ),
    solver: str = typer.Option(
        "rattler",
        "--solver",
        metavar="[rattler|conda-lock]",
        help="rattler (in-process, the default) or conda-lock (runs 'conda-lock lock' with your "
        "conda, mamba or micromamba; it solves from scratch, so over an existing lock it needs "
        "--update-all).",
    ),
    check: bool = typer.Option(
        False,
        "--check",
        help="Exit 0 when every lock matches its current inputs (no solve), 1 when one is "
        "stale: the reasons, and what a re-lock would change (solved as lock would, nothing "
        "written; when the channels cannot be reached, it says so).",
    ),
    resolve: bool = typer.Option(
        False,
        "--resolve",
        help="With --check: also solve again (py-rattler, and uv for pip) with every locked "
        "version as a constraint, and fail on any difference from the lock. Use it in CI on "
        "locks from pull requests.",
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
        envvar="ENVFACTORY_PIP_INDEX",
        help="Where pip wheels are resolved: a folder of wheels or an index URL. Default: PyPI.",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Directory that receives NAME/ with the lock files. Default: locks/ next to "
        "envfactory.yaml for project environments, ./locks for combos.",
    ),
    update: list[str] = typer.Option(
        [],
        "--update",
        "-u",
        metavar="PKG",
        help="Move PKG (conda or pip) to the newest version the inputs allow, and only what it "
        "needs with it; every other package keeps its locked version. Repeatable, or PKG,PKG.",
    ),
    update_all: bool = typer.Option(
        False,
        "--update-all",
        help="Solve from scratch: every package may move (the default keeps the existing "
        "lock's packages where the inputs allow).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Solve and show what would change, without writing anything."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    quiet: bool = conventions.quiet_option(),
    verbose: int = conventions.verbose_option(),
) -> int:
    """Solve a project environment or a combo into locks/NAME/conda-lock.yml and one explicit
    file per platform; with no NAME, every environment of ./envfactory.yaml.

    A re-lock is sticky: the packages of the existing lock are preferred, so only what the
    changed inputs require moves (--update PKG moves PKG, --update-all everything). What
    changed is printed per platform, as 'envfactory diff' prints it.

    Each platform is solved with the combo's virtual packages (__cuda = its CUDA, __glibc,
    __unix/__win), never this machine's. The solution is refused (exit 2) when it holds a CPU
    TensorFlow build, or a cudatoolkit, cudnn, python or numpy outside the combo's pins, or a
    package whose dependencies are not all in the lock. Same inputs, same bytes.
    """
    from envfactory.lockfile.models import LOCK_FILE
    from envfactory.solve.lock import lock_combo

    conventions.set_verbosity(quiet, verbose)
    platform = conventions.platforms(platform, old_platform)
    targets = _lock_targets(
        target, project_file, platform, python, channel_map, solver,
        virtual_package_spec, pip_index, out,
    )  # fmt: skip
    many = target is None
    if resolve and not check:
        raise UserInputError("--resolve goes with --check", "envfactory lock --check --resolve")
    if check:
        return _check(targets, resolve, as_json, many, virtual_package_spec, out)

    from envfactory.lockfile.diff import to_json
    from envfactory.solve import relock

    names = [n.strip() for item in update for n in item.split(",") if n.strip()]
    if names and update_all:
        raise UserInputError("give --update PKG or --update-all, not both")
    console = stdout_console()

    previous_of = {t.directory: relock.previous_lock(t.directory / LOCK_FILE) for t in targets}
    relock.check_update_names(list(previous_of.values()), names, target or "")
    relock.check_solver(targets[0].request.solver, list(previous_of.values()), names, update_all)
    views_out: dict[str, Any] = {}
    for t in targets:
        req = t.request
        previous = previous_of[t.directory]
        if previous.unreadable:
            note(f"note: the existing lock is not used as a preference: {previous.unreadable}")
        prefer = relock.preferred(previous, None if update_all else names)
        verb = "solving (dry run)" if dry_run else "locking"
        note(f"{verb} {t.label} for {', '.join(req.platforms)} (python {req.python})")
        result = lock_combo(
            req,
            t.directory,
            progress=None if as_json else _progress,
            prefer=prefer,
            write=not dry_run,
        )
        change = relock.change_of(
            previous, "dry run" if dry_run else "new lock", result.packages, req.records()
        )
        platforms_view = {
            p: {
                "conda": sum(1 for x in pkgs if x.manager == "conda"),
                "pip": sum(1 for x in pkgs if x.manager == "pip"),
                "seconds": round(result.solve_seconds[p], 3),
            }
            for p, pkgs in result.packages.items()
        }
        views_out[req.name] = {
            "kind": t.kind,
            "directory": str(t.directory),
            "files": [str(p) for p in result.files],
            "platforms": platforms_view,
            "changes": to_json(change)["platforms"],
        }
        if as_json:
            continue
        prefix = f"{req.name} " if many else ""
        for p, counts in platforms_view.items():
            console.print(
                f"{prefix}{p}: {counts['conda']} conda + {counts['pip']} pip packages in "
                f"{result.solve_seconds[p]:.2f} s"
            )
        if previous.packages:
            for line in _change_lines(change, prefix):
                console.print(line)
        for path in result.files:
            console.print(f"wrote {path}")
        if dry_run:
            console.print(f"dry run: nothing written to {t.directory}")
    if as_json:
        if many:
            print_json({"environments": views_out})
        else:
            (single,) = views_out.values()
            print_json({k: v for k, v in single.items() if k != "kind"})
    return EXIT_OK


def _change_lines(change: LockDiff, prefix: str) -> list[str]:
    """What a re-lock changed (``lock``) or would change (``lock --check``), the same lines:
    one summary per platform (``prefix``: the environment's name when there are several),
    one indented line per package."""
    from envfactory.lockfile.diff import to_text

    return [
        line if line.startswith(" ") else f"{prefix}{line}"
        for line in to_text(change, header=False)
    ]


def _check(
    targets: list[_Target],
    resolve: bool,
    as_json: bool,
    many: bool,
    virtual_package_spec: Path | None,
    out: Path | None,
) -> int:
    """``lock --check``: exit 0 when every lock is the lock of its current inputs (no solve),
    1 when one is stale; for a stale lock, what a re-lock would change, as ``lock`` prints it
    (``lockreview.relock_preview``), or why that cannot be shown (channels out of reach, no
    solution): the exit code is 1 either way."""
    from envfactory.lockfile.diff import to_json
    from envfactory.lockfile.models import LOCK_FILE
    from envfactory.solve.lockreview import check_lock, relock_preview

    results = [(t, check_lock(t.request, t.directory, resolve=resolve)) for t in targets]
    previews = {
        t.directory: relock_preview(t.request, t.directory, progress=note)
        for t, r in results
        if not r.fresh
    }
    all_fresh = all(r.fresh for _, r in results)
    code = EXIT_OK if all_fresh else EXIT_BAD_INPUT
    if as_json:
        views = {}
        for t, r in results:
            preview = previews.get(t.directory)
            change = preview.change if preview is not None else None
            views[t.request.name] = {
                "kind": t.kind,
                "lock": str(t.directory / LOCK_FILE),
                "fresh": r.fresh,
                "reasons": list(r.reasons),
                "regenerate": _regenerate(t.request, virtual_package_spec, out),
                "changes": to_json(change)["platforms"] if change is not None else None,
                "changes_unavailable": preview.unavailable if preview is not None else None,
            }
        if many:
            print_json({"fresh": all_fresh, "environments": views})
        else:
            (view,) = views.values()
            keys = ("fresh", "reasons", "changes", "changes_unavailable")
            print_json({k: view[k] for k in keys})
        return code
    lines = []  # plain lines: rich (~0.03 s to import) would add nothing to them
    for t, r in results:
        path = t.directory / LOCK_FILE
        if r.fresh:
            lines.append(f"{path} is up to date: {t.label}")
            continue
        lines.append(f"{path} is stale: {t.label}")
        lines += [f"  {reason}" for reason in r.reasons]
        preview = previews.get(t.directory)
        if preview is not None and preview.change is not None:
            lines.append("a re-lock would change:")
            lines += _change_lines(preview.change, f"{t.request.name} " if many else "")
        elif preview is not None:
            first, *rest = str(preview.unavailable).splitlines() or [""]
            lines.append(f"what a re-lock would change is not shown: {first}")
            lines += [f"  {line}" for line in rest]
            if preview.hint:
                lines.append(f"  hint: {preview.hint}")
        lines.append(f"regenerate: {_regenerate(t.request, virtual_package_spec, out)}")
    write_lines(lines)
    return code


def create(
    target: str | None = typer.Argument(
        None,
        help="A project environment (uses locks/ENV/ next to envfactory.yaml), a combo (uses "
        "locks/COMBO/conda-lock.yml) or a conda-lock.yml path.",
        show_default=False,
    ),
    lock_file: Path | None = typer.Option(
        None, "--file", "-f", help="The conda-lock.yml to create from (instead of NAME)."
    ),
    prefix: Path | None = conventions.prefix_option("Create the env here."),
    name: str | None = conventions.name_option(
        "Create the env as NAME in the first envs directory, found as conda and micromamba "
        "find it: CONDA_ENVS_DIRS, envs_dirs of .condarc, $MAMBA_ROOT_PREFIX/envs, "
        "~/.conda/envs."
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace an existing conda environment (a directory with conda-meta/) at the "
        "prefix; never the current directory or one of its parents, never any other directory.",
    ),
    platform: str | None = typer.Option(
        None,
        *conventions.PLATFORM_NAMES,
        help="Lay out the env for this platform (default: this machine's).",
    ),
    locks_dir: Path | None = typer.Option(
        None,
        "--locks",
        help="Where NAME/conda-lock.yml is looked up (default: locks/ next to envfactory.yaml "
        "for project environments, ./locks for combos).",
    ),
    project_file: Path | None = typer.Option(None, "--project", help=PROJECT_HELP),
    channel_map: list[str] = typer.Option(
        [],
        "--channel-map",
        help="NAME=URL: take the packages of channel NAME from URL or a directory instead of "
        "where they were locked, e.g. defaults=file:///srv/mirror (what 'envfactory mirror' "
        "writes). Hashes are still the lock's. Repeatable. Also read from [channels] in "
        "envfactory.toml and from ENVFACTORY_CHANNEL_MAP (NAME=URL,NAME=URL).",
    ),
    pip_index: Path | None = typer.Option(
        None,
        "--pip-index",
        envvar="ENVFACTORY_PIP_INDEX",
        help="A local pip index to take the locked pip files from instead of their URLs: the "
        "pypi/simple index 'envfactory mirror' writes (found by itself when --channel-map points "
        "at the mirror), or a folder holding the files by name. Hashes are still the lock's.",
    ),
    allow_build: list[str] = typer.Option(
        [],
        "--allow-build",
        help="Build this package's sdist although envfactory has not vetted it (its setup code "
        "runs, offline). Repeatable. Vetted sdists (gast 0.2.2, termcolor 1.1.0, clang 5.0) "
        "need no flag.",
    ),
    compile_bytecode: bool = typer.Option(
        False,
        "--compile",
        help="Compile site-packages to bytecode after the environment is in place. This runs "
        "the environment's own python (a program from the lock); without it create runs "
        "nothing from the environment and Python compiles on first import.",
    ),
    dry_run: bool = conventions.dry_run_option(
        "Say what would be created (prefix, platform, packages) and write nothing."
    ),
    quiet: bool = conventions.quiet_option(),
    verbose: int = conventions.verbose_option(),
    yes: bool = conventions.yes_option(
        "Accepted for conda's hands; create never asks (an existing env needs --force)."
    ),
    update: bool = typer.Option(
        False,
        "--update",
        help="Bring an environment that envfactory created from an older lock to this lock: "
        "the packages both hold are kept, only what differs is linked; the old environment "
        "stays as it was until the new one is complete.",
    ),
) -> int:
    """Create an environment with exactly the locked packages for this platform.

    Packages come through the shared package cache (see 'envfactory cache info'): each archive
    is checked against the lock's sha256 (or md5), file:// ones included, and each paths.json
    entry and file before it enters; they are then hard-linked into the prefix. The env is
    built in a directory next to PREFIX and moved into place, so a failure or an interrupt
    (Ctrl-C, SIGTERM, SIGHUP; kill -9 is cleaned up by the next run) leaves nothing behind.
    A project environment without -p/-n goes to envs/ENV next to envfactory.yaml. The new
    env is added to ~/.conda/environments.txt, where 'conda env list' looks (as conda does;
    CONDA_REGISTER_ENVS=false turns it off).
    """
    from envfactory.catalog.platforms import parse_platform
    from envfactory.cli.transfer import transfer_display
    from envfactory.install.create import create_environment
    from envfactory.project.envdirs import register
    from envfactory.project.targets import lock_target, named_prefix
    from envfactory.solve.channels import CONFIG_FILE, load_channel_map

    conventions.set_verbosity(quiet, verbose)
    if prefix is not None and name is not None:
        raise UserInputError("give exactly one of -p PREFIX and -n NAME", "e.g. -p ./envs/tf114")
    if (target is None) == (lock_file is None):
        raise UserInputError(
            "give what to create from: a NAME or -f LOCKFILE (one of them)",
            "e.g. envfactory create tf114-cuda100 -p ./envs/tf114, or -f locks/x/conda-lock.yml",
        )
    if lock_file is not None and not lock_file.is_file():
        raise UserInputError(f"-f {lock_file}: no such file", "pass the path of a conda-lock.yml")
    source = str(lock_file) if lock_file is not None else str(target)
    chosen_target = lock_target(source, project_file=project_file, locks_dir=locks_dir)
    project = chosen_target.project
    lock_path = chosen_target.lock
    where = prefix if name is None else named_prefix(name)
    where = where or chosen_target.default_prefix
    if where is None:
        raise UserInputError("give exactly one of -p PREFIX and -n NAME", "e.g. -p ./envs/tf114")
    if project is not None:
        note(chosen_target.describe())
    chosen: Platform | None = parse_platform(platform) if platform else None
    config = project.directory / CONFIG_FILE if project is not None else None
    cmap = load_channel_map(channel_map, config=config)
    if dry_run:
        return _dry_run(lock_path, where, chosen, force)
    if update:
        if force:
            raise UserInputError("give --update or --force, not both")
        return _update(lock_path, where, chosen, cmap, pip_index, allow_build)
    note(f"creating {where} from {lock_path}")
    # A bar with bytes and rate on a terminal, lines under -v elsewhere (cli/transfer.py)
    bar = transfer_display("packages")
    pip_bar = transfer_display("pip files")
    try:
        result = create_environment(
            lock_path,
            where,
            force=force,
            platform=chosen,
            progress=_progress,
            channel_map=cmap,
            wheel_dir=pip_index,
            cache_progress=bar,
            pip_transfer=pip_bar,
            allow_build=allow_build,
            compile_bytecode=compile_bytecode,
        )
    finally:
        bar.stop()
        pip_bar.stop()
    # plain lines: rich (~0.05 s to import) would add nothing to them
    lines = []
    if result.replaced is not None:
        lines.append(f"replaced the conda environment {result.replaced}")
    cached = f"{result.from_cache} conda packages from the cache"
    if result.pip:
        cached += f", {result.pip_cached} pip files; {result.pip_downloaded} bytes downloaded"
    lines.append(
        f"created {result.prefix} ({result.platform}): {result.conda} conda + "
        f"{result.pip} pip packages ({cached})"
    )
    if result.built:
        lines.append(f"built from sdists: {', '.join(result.built)}")
    lines += [f"activation script {path}" for path in result.activation]
    listing = register(result.prefix)
    if listing is not None:
        detail(f"registered {result.prefix} in {listing} (conda env list shows it)")
    write_lines(lines)
    if result.activation_note:
        warn(f"note: {result.activation_note}")
    return EXIT_OK


def _dry_run(lock_path: Path, where: Path, platform: Platform | None, force: bool) -> int:
    """``create --dry-run``: what create would do, from the lock alone; nothing is written
    (the checks that need no download are made: the platform, the prefix)."""
    from envfactory.catalog.platforms import host_platform
    from envfactory.install.create import check_target
    from envfactory.lockfile.read import read_lock

    chosen = platform or host_platform()
    lock = read_lock(lock_path)
    if chosen not in lock.platforms:
        raise UserInputError(
            f"{lock_path} has no packages for {chosen} (it covers {', '.join(lock.platforms)})",
            f"lock for this platform: envfactory lock COMBO --platform {chosen}",
        )
    prefix = where.expanduser().absolute()
    replacing = check_target(prefix, force)
    packages = [p for p in lock.packages if p.platform == chosen]
    conda = sum(1 for p in packages if p.manager == "conda")
    verb = f"replace the conda environment {prefix} with" if replacing else f"create {prefix}:"
    sys.stdout.write(
        f"dry run: would {verb} {conda} conda + {len(packages) - conda} pip packages "
        f"({chosen}) from {lock_path}; nothing was written\n"
    )
    for pkg in sorted(packages, key=lambda p: (p.manager, p.name)):
        detail(f"  {pkg.manager} {pkg.name} {pkg.version}")
    sys.stdout.flush()
    return EXIT_OK


def _update(
    lock_path: Path,
    prefix: Path,
    platform: Platform | None,
    channel_map: ChannelMap,
    pip_index: Path | None,
    allow_build: list[str],
) -> int:
    """create --update: the environment brought to the lock, and what changed."""
    from envfactory.cli.transfer import transfer_display
    from envfactory.install.update import PackageSources, describe, update_environment

    note(f"updating {prefix} to {lock_path}")
    bar = transfer_display("packages")
    try:
        sources = PackageSources(
            channel_map=channel_map, wheel_dir=pip_index, allow_build=allow_build
        )
        done = update_environment(
            lock_path, prefix, sources, platform=platform, progress=_progress, cache_progress=bar
        )
    finally:
        bar.stop()
    result = done.created
    lines = describe(done.changes)
    lines.append(
        f"updated {result.prefix} ({result.platform}): {result.conda} conda + {result.pip} pip "
        f"packages ({done.kept} conda packages kept, {result.conda - done.kept} linked)"
    )
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()
    return EXIT_OK


def verify(
    positional: Path | None = typer.Argument(
        None, help="The environment's prefix (or give -p PREFIX / -n NAME).", show_default=False
    ),
    prefix: Path | None = conventions.prefix_option("The environment's prefix."),
    name: str | None = conventions.name_option(
        "The environment NAME in the envs directories (as 'create -n' puts it)."
    ),
    lock_file: Path | None = typer.Option(
        None, "--lock", help="The lock to compare with (default: the one that created PREFIX)."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> int:
    """Compare an environment with its lock: missing, extra and different packages; then
    every file of the conda packages against its record (missing, or altered: size or sha256
    differ), as conda's health checks do.

    Exit 0 only when they are identical, 3 otherwise.
    """
    from envfactory.install.verify import verify_environment

    where = conventions.existing_environment(prefix, name, positional)
    if where is None:
        raise UserInputError("which environment? give PREFIX, -p PREFIX or -n NAME")
    report = verify_environment(where, lock_file)
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
                "files_checked": report.files_checked,
                "missing_files": [
                    {"package": f.package, "path": f.path} for f in report.missing_files
                ],
                "altered_files": [
                    {"package": f.package, "path": f.path, "problem": f.problem}
                    for f in report.altered_files
                ],
            }
        )
    else:
        console = stdout_console()
        if report.identical:
            console.print(
                f"{report.prefix} is identical to {report.lock} "
                f"({report.checked} packages, {report.files_checked} files, {report.platform})"
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
            for problem in report.missing_files:
                console.print(f"  missing file  {problem.path} ({problem.package})")
            for problem in report.altered_files:
                console.print(
                    f"  altered file  {problem.path} ({problem.package}): {problem.problem}"
                )
    return EXIT_OK if report.identical else EXIT_PROBLEMS_FOUND


cache_app = typer.Typer(
    name="cache",
    help="The package cache that create and mirror share (ENVFACTORY_PKGS_DIRS, else "
    "$XDG_CACHE_HOME/envfactory/pkgs).",
    no_args_is_help=True,
)


@cache_app.command("info")
def cache_info(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Where the package cache is and what it holds."""
    from envfactory.cache.pipcache import PipCache
    from envfactory.cache.pkgcache import PackageCache

    info = PackageCache().info()
    pip_files, pip_built, pip_bytes = PipCache(info.root).info()
    view = {
        "root": str(info.root),
        "archive_sources": [str(p) for p in info.archive_sources],
        "packages": info.packages,
        "archives": info.archives,
        "pip_files": pip_files,
        "pip_built_wheels": pip_built,
        "pip_bytes": pip_bytes,
        "staging": info.staging,
        "locks": info.locks,
        "bytes": info.bytes,
    }
    if as_json:
        print_json(view)
        return EXIT_OK
    console = stdout_console()
    console.print(f"package cache {info.root}")
    console.print(
        f"  {info.packages} extracted packages, {info.archives} archives, {info.bytes / 1e6:.1f} MB"
    )
    if pip_files or pip_built:
        console.print(
            f"  {pip_files} pip files (wheels, sdists), {pip_built} wheels built from sdists, "
            f"{pip_bytes / 1e6:.1f} MB"
        )
    if info.locks:
        console.print(f"  {info.locks} parsed locks (a warm create skips parsing the YAML again)")
    if info.staging:
        console.print(f"  {info.staging} staging directories (work in progress or left over)")
    for source in info.archive_sources:
        console.print(f"  reads archives from {source} (read-only)")
    return EXIT_OK


@cache_app.command("clean")
def cache_clean(
    archives_only: bool = typer.Option(
        False, "--archives", help="Remove only the archives, keep the extracted packages."
    ),
    extracted_only: bool = typer.Option(
        False, "--extracted", help="Remove only the extracted packages, keep the archives."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    yes: bool = conventions.yes_option("Do not ask before deleting (needed without a terminal)."),
    dry_run: bool = conventions.dry_run_option("Say what would be removed; remove nothing."),
) -> int:
    """Empty the package cache, conda packages and pip files, after asking (as 'conda clean'
    does; -y does not ask). Entries a running create links from are kept; environments already
    created keep their files (hard links, copies)."""
    from envfactory.cache.pkgcache import PackageCache

    if archives_only and extracted_only:
        raise UserInputError("give at most one of --archives and --extracted")
    from envfactory.cache.pipcache import PipCache

    cache = PackageCache()
    info = cache.info()
    pip_files, pip_built, _pip_bytes = PipCache(cache.root).info()
    what = {
        (True, True): f"{info.packages} extracted packages and {info.archives} archives",
        (True, False): f"{info.archives} archives",
        (False, True): f"{info.packages} extracted packages",
    }[(not extracted_only, not archives_only)]
    if not extracted_only and pip_files + pip_built:
        what += f" and {pip_files + pip_built} pip files"
    question = f"remove {what} from {cache.root} ({info.bytes / 1e6:.1f} MB in all)"
    if dry_run:
        if as_json:
            print_json({"root": str(cache.root), "dry_run": True, "would_remove": what})
        else:
            stdout_console().print(f"dry run: would {question}; nothing was removed")
        return EXIT_OK
    conventions.confirm(question, yes)
    removed, freed = cache.clean(archives=not extracted_only, extracted=not archives_only)
    if not extracted_only:  # the pip side holds archives only (wheels, sdists)
        pip_removed, pip_freed = PipCache(cache.root).clean()
        removed, freed = removed + pip_removed, freed + pip_freed
    if as_json:
        print_json({"root": str(cache.root), "removed": removed, "bytes_freed": freed})
        return EXIT_OK
    stdout_console().print(f"removed {removed} entries from {cache.root} ({freed / 1e6:.1f} MB)")
    return EXIT_OK


def register(app: typer.Typer) -> None:
    """Add lock, create, verify and cache to the app."""
    app.command("lock")(lock)
    app.command("create")(create)
    app.command("verify")(verify)
    app.add_typer(cache_app)


def _regenerate(request: LockRequest, virtual_package_spec: Path | None, out: Path | None) -> str:
    """The full regenerate command, with the options only this command line knows."""
    import shlex

    parts = [request.regenerate(full=True)]
    if request.solver == "conda-lock":
        parts.append("--update-all")  # conda-lock cannot keep a lock (relock.check_solver)
    if virtual_package_spec is not None:
        parts.append(f"--virtual-package-spec {shlex.quote(str(virtual_package_spec))}")
    if out is not None:
        parts.append(f"-o {shlex.quote(str(out))}")
    return " ".join(parts)
