"""Lock stage: render a combo, solve each platform (virtual packages from the combo, never the
host), refuse a wrong solution, lock the pip part, and write ``conda-lock.yml`` (conda-lock v1,
written by conda-lock's own writer) plus one ``@EXPLICIT`` file per platform, atomically.

The input is a combo, optionally with the ``Additions`` of a project environment
(``envfactory.yaml``: extra conda and pip packages, channels, variables). Both go through the same
solve, the same post-solve checks and the same writer; a plain combo lock has empty additions
and records exactly the inputs it always did.

``check_lock`` answers "is the lock still the lock of the current inputs?" without solving.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envfactory import __version__
from envfactory.catalog.model import PLATFORMS, Combo, Platform
from envfactory.errors import ToolError, UserInputError
from envfactory.fsio import RenderedFile
from envfactory.lockfile.models import LOCK_FILE, LockedPackage
from envfactory.lockfile.record import LockMetadata, file_digest
from envfactory.lockfile.write import explicit_name, explicit_text, lock_text, write_lock_set
from envfactory.progress import Progress
from envfactory.render.environment import (
    NO_ADDITIONS,
    VIRTUAL_PACKAGES_FILE,
    Additions,
    EnvironmentSpec,
    environment_spec,
    render_combo,
    resolve_python,
)
from envfactory.solve.channels import ChannelMap
from envfactory.solve.checks import (
    absent_names,
    check_solution,
    refuse,
    solver_hint,
)
from envfactory.solve.inputs import (
    INPUTS_FORMAT,
    PlatformInputs,
    SolverKind,
    inputs_hash,
    platform_inputs,
)
from envfactory.untrusted import redact_url

if TYPE_CHECKING:
    from envfactory.solve.pypi import PipTarget

__all__ = [
    "INPUTS_FORMAT",
    "LOCK_FILE",
    "SOLVERS",
    "LockRequest",
    "LockResult",
    "PlatformInputs",
    "SolverKind",
    "explicit_name",
    "inputs_hash",
    "lock_combo",
    "pip_target",
    "read_virtual_spec",
    "solve_platform",
    "write_lock_set",
]

SOLVERS: tuple[SolverKind, ...] = ("rattler", "conda-lock")


@dataclass(frozen=True)
class LockRequest:
    combo: Combo
    platforms: tuple[Platform, ...]
    python: str
    channel_map: ChannelMap
    solver: SolverKind = "rattler"
    virtual_packages: Mapping[Platform, Mapping[str, str]] = field(default_factory=dict)
    pip_index: str | None = None
    additions: Additions = NO_ADDITIONS
    #: the combo's spec per platform, resolved once when the request is made (render, the
    #: solve, the checks and the recorded inputs all read these, never the catalog again)
    specs: Mapping[Platform, EnvironmentSpec] = field(default_factory=dict)

    @classmethod
    def for_combo(
        cls,
        combo: Combo,
        *,
        platforms: Sequence[Platform] = (),
        python: str | None = None,
        channel_map: ChannelMap | None = None,
        solver: SolverKind = "rattler",
        virtual_packages: Mapping[Platform, Mapping[str, str]] | None = None,
        pip_index: str | None = None,
        additions: Additions | None = None,
    ) -> LockRequest:
        covered = [p for p in PLATFORMS if p in combo.platforms]
        chosen = tuple(dict.fromkeys(platforms)) if platforms else tuple(covered)
        for platform in chosen:
            combo.route(platform)
        py = resolve_python(combo, chosen, python)
        return cls(
            specs={p: environment_spec(combo, p, py) for p in chosen},
            combo=combo,
            platforms=chosen,
            python=py,
            channel_map=channel_map or ChannelMap({}),
            solver=solver,
            virtual_packages=dict(virtual_packages or {}),
            pip_index=pip_index,
            additions=additions or NO_ADDITIONS,
        )

    @property
    def name(self) -> str:
        """The lock's name: the project environment's, else the combo's (``locks/<name>/``)."""
        return self.additions.environment or self.combo.name

    @cached_property
    def inputs(self) -> Mapping[Platform, PlatformInputs]:
        """Every platform's inputs, resolved once (the first time they are needed: a GPU combo
        given virtual packages without ``__cuda`` is refused here)."""
        return {
            p: platform_inputs(
                self.combo,
                p,
                self.spec(p),
                channel_map=self.channel_map,
                solver=self.solver,
                virtual_packages=self.virtual_packages.get(p),
                pip_index=self.pip_index,
                additions=self.additions,
            )
            for p in self.platforms
        }

    def spec(self, platform: Platform) -> EnvironmentSpec:
        """The combo's own spec: what the post-solve checks hold the solution to."""
        resolved = self.specs.get(platform)
        if resolved is None or resolved.combo is not self.combo or resolved.python != self.python:
            # made field by field, or changed with dataclasses.replace: resolve here
            return environment_spec(self.combo, platform, self.python)
        return resolved

    def records(self) -> dict[Platform, dict[str, Any]]:
        """Every platform's ``PlatformInputs.record()``: what the lock records."""
        return {p: self.inputs[p].record() for p in self.platforms}

    def regenerate(self, full: bool = False) -> str:
        """The command that makes this lock again. The short form (written into the lock files)
        names the combo and what differs from its defaults; ``full`` adds every option that
        changes the lock and lives outside the catalog and envfactory.yaml: the channel map of
        the channels in use and the pip index (``lock --check`` prints it)."""
        base = self._regenerate_base
        if not full:
            return base
        import shlex

        used = dict.fromkeys(c for p in self.platforms for c in self.inputs[p].channels)
        extra = [
            f"--channel-map {shlex.quote(f'{name}={redact_url(self.channel_map.overrides[name])}')}"
            for name in used
            if name in self.channel_map.overrides
        ]
        if self.pip_index is not None and any(self.inputs[p].pip for p in self.platforms):
            extra.append(f"--pip-index {shlex.quote(redact_url(self.pip_index))}")
        return " ".join([base, *extra])

    @cached_property
    def _regenerate_base(self) -> str:
        if not self.additions.empty:
            # Platforms and python come from envfactory.yaml, so the name is the whole command.
            solver = f" --solver {self.solver}" if self.solver != "rattler" else ""
            return f"envfactory lock {self.name}{solver}"
        parts = ["envfactory lock", self.combo.name]
        covered = tuple(p for p in PLATFORMS if p in self.combo.platforms)
        if self.platforms != covered:
            parts += [f"--platform {p}" for p in self.platforms]
        if self.python != self.combo.python_default:
            parts.append(f"--python {self.python}")
        if self.solver != "rattler":
            parts.append(f"--solver {self.solver}")
        return " ".join(parts)

    def spec_origins(self, platform: Platform) -> dict[str, list[str]]:
        """For each package name, the specs of this lock that ask for it and whose they are
        (for no-solution hints)."""
        from envfactory.lockfile.models import dependency_name

        inputs = self.inputs[platform]
        out: dict[str, list[str]] = {}

        def add(text: str, whose: str) -> None:
            name = dependency_name(text.split("::", 1)[-1])
            out.setdefault(name, []).append(f"'{text}' ({whose})")

        python_whose = (
            f"the python of {self.combo.name}"
            if self.python == self.combo.python_default
            else "--python"
        )
        add(f"python={self.python}", python_whose)
        for pin in inputs.spec.conda:
            add(pin.qualified_spec, f"{self.combo.name}'s pin, sources: {', '.join(pin.sources)}")
        for text in self.additions.conda:
            add(text, f"added by envfactory.yaml ({self.name})")
        for c in inputs.constraints:
            add(c.conda_spec, f"companion constraint, sources: {', '.join(c.sources)}")
        return out


def read_virtual_spec(path: Path) -> dict[Platform, dict[str, str]]:
    """A conda-lock virtual-package file: ``subdirs: {PLATFORM: {packages: {NAME: VERSION}}}``."""
    from envfactory.fsio import read_text
    from envfactory.yamlio import load_plain

    hint = "the file holds subdirs: PLATFORM: packages: NAME: VERSION (conda-lock's format)"
    try:
        text = read_text(path, "the virtual-package file", hint)
    except OSError as exc:
        raise UserInputError(f"cannot read {path}: {exc}", hint) from None
    doc = load_plain(str(path), text, hint)
    subdirs = doc.get("subdirs") if isinstance(doc, dict) else None
    if not isinstance(subdirs, dict):
        raise UserInputError(f"{path} has no 'subdirs' mapping", hint)
    out: dict[Platform, dict[str, str]] = {}
    for platform, body in subdirs.items():
        if platform not in PLATFORMS:
            continue
        packages = body.get("packages") if isinstance(body, dict) else None
        if not isinstance(packages, dict):
            raise UserInputError(f"{path}: subdirs.{platform} has no 'packages' mapping", hint)
        out[platform] = {str(k): str(v) for k, v in packages.items()}
    return out


@dataclass(frozen=True)
class LockResult:
    directory: Path
    files: tuple[Path, ...]
    packages: Mapping[Platform, tuple[LockedPackage, ...]]
    solve_seconds: Mapping[Platform, float]


def solve_platform(
    request: LockRequest,
    platform: Platform,
    virtual: Mapping[str, str] | None = None,
    preferred: Sequence[LockedPackage] = (),
) -> list[LockedPackage]:
    """Solve the conda part of one platform with py-rattler, then check it (exit 2 on either
    failure). ``virtual`` replaces the request's virtual packages; tests use it to show what the
    solver says without ``__cuda``. ``preferred``: the previous lock's packages, kept where the
    inputs allow."""
    from envfactory.solve import rattler_adapter

    inputs = request.inputs[platform]
    vpkgs = dict(virtual) if virtual is not None else dict(inputs.virtual_packages)
    channels = list(inputs.channel_urls)
    try:
        packages = rattler_adapter.solve(
            list(inputs.conda),
            channels,
            platform,
            vpkgs,
            constraints=inputs.conda_constraints,
            preferred=preferred,
        )
    except rattler_adapter.Unsatisfiable as exc:
        absent = absent_names(exc.explanation)
        offered = rattler_adapter.offered_versions(absent, channels, platform) if absent else {}
        raise ToolError(
            f"no solution for {request.name} on {platform}:\n{_plain(exc.explanation)}",
            solver_hint(exc.explanation, vpkgs, offered, request.spec_origins(platform)),
        ) from None
    problems = check_solution(inputs.spec, packages, rattler_adapter.matches)
    if problems:
        raise refuse(request.name, platform, problems)
    return packages


def _plain(explanation: str) -> str:
    """The solver's tree, minus box-drawing characters, indented under the error line."""
    lines = [re.sub(r"[│├└─]+", "", line).rstrip() for line in explanation.splitlines()]
    return "\n".join(f"  {line.strip()}" if line.strip() else "" for line in lines).strip("\n")


def pip_target(
    request: LockRequest,
    platform: Platform,
    conda: Sequence[LockedPackage],
    preferred: Sequence[LockedPackage] = (),
) -> PipTarget | None:
    """What uv resolves for ``platform`` (None without pip requirements): lock's, and the
    base of ``lock --check --resolve``'s pinned re-resolution (lockreview)."""
    inputs = request.inputs[platform]
    if not inputs.pip:
        return None
    from envfactory.solve.pypi import PipTarget

    return PipTarget(
        requirements=inputs.pip,
        platform=platform,
        python=request.python,
        glibc=inputs.virtual_packages.get("__glibc"),
        conda_packages=tuple(conda),
        constraints=inputs.constraints,
        index=request.pip_index,
        preferences=tuple((p.name, p.version) for p in preferred if p.manager == "pip"),
    )


def _requirement_name(text: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        return text


def _pip_packages(
    request: LockRequest,
    conda: Mapping[Platform, Sequence[LockedPackage]],
    progress: Progress,
    prefer: Mapping[Platform, Sequence[LockedPackage]],
) -> dict[Platform, list[LockedPackage]]:
    """The pip part of every platform, resolved in parallel (each resolution is a uv process),
    then checked together with the platform's conda part."""
    targets = {p: pip_target(request, p, conda[p], prefer.get(p, ())) for p in request.platforms}
    jobs = {p: t for p, t in targets.items() if t is not None}
    out: dict[Platform, list[LockedPackage]] = {p: [] for p in request.platforms}
    if not jobs:
        return out
    from concurrent.futures import ThreadPoolExecutor

    from envfactory.solve import pypi

    for platform, target in jobs.items():
        progress(f"{platform}: locking pip packages {', '.join(target.requirements)}")
    pypi.uv_binary()  # found once, before the threads (see uv_binary)
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {p: pool.submit(_pip_locked, t) for p, t in jobs.items()}
        results = {p: f.result() for p, f in futures.items()}
    for platform in request.platforms:
        if platform not in results:
            continue
        packages = results[platform]
        inputs = request.inputs[platform]
        problems = check_solution(
            inputs.spec,
            [*conda[platform], *packages],
            _matches(),
            with_pip=True,
            requested=[_requirement_name(r) for r in inputs.pip],
        )
        if problems:
            raise refuse(request.name, platform, problems)
        out[platform] = packages
    return out


def _pip_locked(target: PipTarget) -> list[LockedPackage]:
    """The pip packages of ``target`` with what each requires: the lock records the edges, so a
    package nothing requires can be told (``lockfile.unreachable``)."""
    from envfactory.solve import pipdeps, pypi

    return pipdeps.with_dependencies(target, pypi.lock_target(target))


def _rendered_inputs(request: LockRequest) -> list[RenderedFile]:
    plans = {p: request.inputs[p].activation for p in request.platforms}
    specs = {p: request.inputs[p].spec for p in request.platforms}
    if request.additions.empty:
        return render_combo(
            request.combo,
            platforms=list(request.platforms),
            python=request.python,
            resolved=specs,
            plans=plans,
        )
    return render_combo(
        request.combo,
        platforms=list(request.platforms),
        python=request.python,
        additions=request.additions,
        regenerate=request.regenerate(),
        resolved=specs,
        plans=plans,
    )


def _env_file_of(files: Sequence[RenderedFile], platform: Platform) -> str:
    names = {f.relpath for f in files}
    own = f"environment.{platform}.yml"
    return own if own in names else "environment.yml"


def lock_combo(
    request: LockRequest,
    directory: Path,
    progress: Progress | None = None,
    *,
    prefer: Mapping[Platform, Sequence[LockedPackage]] | None = None,
    write: bool = True,
) -> LockResult:
    """Solve every requested platform and write the lock files into ``directory``.

    ``prefer``: per platform, the packages of the lock being replaced that may stay
    (``sticky.preferred``): the conda solver and uv keep them where the inputs allow, so only
    what the inputs force moves. ``write=False`` solves and checks without writing
    (``lock --dry-run``)."""
    say = progress or (lambda _m: None)
    prefer = prefer or {}
    rendered = _rendered_inputs(request)
    conda: dict[Platform, list[LockedPackage]] = {}
    seconds: dict[Platform, float] = {}
    for platform in request.platforms:
        say(f"{platform}: solving {' '.join(request.inputs[platform].requested)}")
        start = time.perf_counter()
        if request.solver == "conda-lock":
            conda[platform] = _solve_with_conda_lock(request, platform, rendered)
            problems = check_solution(request.inputs[platform].spec, conda[platform], _matches())
            if problems:
                raise refuse(request.name, platform, problems)
        else:
            conda[platform] = solve_platform(request, platform, preferred=prefer.get(platform, ()))
        seconds[platform] = time.perf_counter() - start
    start = time.perf_counter()
    pip = _pip_packages(request, conda, say, prefer)
    pip_seconds = time.perf_counter() - start
    solved: dict[Platform, tuple[LockedPackage, ...]] = {}
    for platform in request.platforms:
        # the lock, the explicit files and every record made from them carry no credentials
        solved[platform] = tuple(
            p._replace(url=redact_url(p.url), channel=redact_url(p.channel))
            for p in (*conda[platform], *pip[platform])
        )
        if pip[platform]:
            seconds[platform] += pip_seconds
        say(f"{platform}: {len(conda[platform])} conda + {len(pip[platform])} pip packages")

    written = write_lock_set(directory, _lock_files(request, rendered, solved)) if write else []
    return LockResult(
        directory=directory,
        files=tuple(written),
        packages=solved,
        solve_seconds=seconds,
    )


def _solve_with_conda_lock(
    request: LockRequest, platform: Platform, rendered: Sequence[RenderedFile]
) -> list[LockedPackage]:
    from envfactory.solve import condalock_cli

    inputs = request.inputs[platform]
    with tempfile.TemporaryDirectory(prefix="envfactory-render-") as tmp:
        _write_inputs(rendered, Path(tmp))
        vp = Path(tmp) / VIRTUAL_PACKAGES_FILE
        if request.virtual_packages:
            subdirs = {platform: {"packages": dict(inputs.virtual_packages)}}
            vp.write_text(json.dumps({"subdirs": subdirs}))
        return condalock_cli.solve_with_cli(
            Path(tmp) / _env_file_of(rendered, platform),
            vp,
            platform,
            inputs.channel_urls,
            dict(os.environ),
        )


def _write_inputs(rendered: Sequence[RenderedFile], directory: Path) -> None:
    """The rendered files, for conda-lock to read (some live in subdirectories)."""
    for f in rendered:
        path = directory / f.relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f.content, encoding="utf-8")


def _matches() -> Callable[[str, LockedPackage], bool]:
    from envfactory.solve import rattler_adapter

    return rattler_adapter.matches


def _lock_files(
    request: LockRequest,
    rendered: Sequence[RenderedFile],
    solved: Mapping[Platform, Sequence[LockedPackage]],
) -> list[tuple[str, str]]:
    from envfactory.lockfile import condalock_adapter
    from envfactory.solve import rattler_adapter

    with tempfile.TemporaryDirectory(prefix="envfactory-render-") as tmp:
        _write_inputs(rendered, Path(tmp))
        env_files = {p: Path(tmp) / _env_file_of(rendered, p) for p in request.platforms}
        content_hash = condalock_adapter.content_hashes(
            env_files, Path(tmp) / VIRTUAL_PACKAGES_FILE
        )

    # conda-lock.yml goes last and carries the digests of the others: written in this order, a
    # set that a killed ``lock`` left half replaced reads as stale under ``--check``.
    others = [(f.relpath, f.content) for f in rendered]
    others += [
        (
            explicit_name(p),
            explicit_text(
                solved[p],
                name=request.name,
                regenerate=request.regenerate(),
                platform=p,
                input_hash=content_hash[p],
            ),
        )
        for p in request.platforms
    ]
    inputs = request.inputs
    names = list(dict.fromkeys(c for p in request.platforms for c in inputs[p].channels))
    urls = request.channel_map.urls(names)
    solver = (
        rattler_adapter.solver_name()
        if request.solver == "rattler"
        else "conda-lock (conda-lock lock CLI)"
    )
    records = request.records()
    metadata = LockMetadata(
        combo=request.combo.name,
        python=request.python,
        envfactory_version=__version__,
        regenerate=request.regenerate(),
        solver=solver,
        channels={name: redact_url(url) for name, url in zip(names, urls, strict=True)},
        inputs_sha256=inputs_hash(records),
        inputs=records,
        virtual_packages={p: inputs[p].virtual_packages for p in request.platforms},
        environment=None if request.additions.empty else request.name,
        variables=dict(request.additions.variables),
        files={name: file_digest(text.encode("utf-8")) for name, text in others},
        activation={p: inputs[p].activation.runtime() for p in request.platforms},
    )
    lock = lock_text(
        [pkg for p in request.platforms for pkg in solved[p]],
        platforms=request.platforms,
        channels=[redact_url(u) for u in urls],
        sources=sorted({_env_file_of(rendered, p) for p in request.platforms}),
        content_hash=content_hash,
        metadata=metadata,
    )
    return [*others, (LOCK_FILE, lock)]
