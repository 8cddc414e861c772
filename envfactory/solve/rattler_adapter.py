"""The one place that talks to py-rattler: solve, match, install, read installed records.

py-rattler 0.28 quirks handled here (each seen with py-rattler 0.28.0):
``name=ver=build`` strings need ``MatchSpec(s, strict=False)``; a ``Gateway`` caches repodata,
so every solve gets a fresh one; ``install`` needs a ``Subdir``; ``record.build`` is a
``BuildString``; ``install`` does not check hashes of ``file://`` packages (``create`` does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

import rattler
from rattler import (
    BuildString,
    GenericVirtualPackage,
    MatchSpec,
    PackageName,
    PackageRecord,
    RepoDataRecord,
    Subdir,
    Version,
)
from rattler.exceptions import GatewayError, InstallerError, InvalidMatchSpecError, SolverError

from envfactory.catalog.platforms import Platform
from envfactory.errors import ToolError, UserInputError
from envfactory.lockfile.models import LockedPackage, dependency_name


class Unsatisfiable(Exception):
    """The solver found no solution; ``explanation`` is its own account of why."""

    def __init__(self, explanation: str) -> None:
        super().__init__(explanation)
        self.explanation = explanation


def solver_name() -> str:
    from importlib.metadata import version  # ~0.03 s: only the lock path needs it

    return f"rattler (py-rattler {version('py-rattler')})"


def match_spec(text: str) -> MatchSpec:
    try:
        return MatchSpec(text, strict=False)
    except InvalidMatchSpecError as exc:
        raise UserInputError(f"not a valid conda match spec: '{text}': {exc}") from None


def spec_name_and_channel(text: str) -> tuple[str, str | None]:
    """The package name and the channel (``conda-forge::pandas``) of a match spec; raises
    ``UserInputError`` when it is not one, or names no package."""
    spec = match_spec(text)
    if spec.name is None:
        raise UserInputError(f"'{text}' names no package", "write e.g. opencv=3.4.2 or pandas")
    channel = spec.channel.name if spec.channel is not None else None
    return spec.name.normalized, channel


def _virtual(packages: Mapping[str, str]) -> list[GenericVirtualPackage]:
    out = []
    for name, text in sorted(packages.items()):
        version, _, build = text.partition("=")
        out.append(
            GenericVirtualPackage(PackageName(name), Version(version), BuildString(build or "0"))
        )
    return out


def solve(
    specs: Sequence[str],
    channels: Sequence[str],
    platform: Platform,
    virtual_packages: Mapping[str, str],
    constraints: Sequence[str] = (),
    preferred: Sequence[LockedPackage] = (),
) -> list[LockedPackage]:
    """Solve ``specs`` for ``platform`` against ``channels`` (URLs), with exactly the given
    virtual packages (never the host's). ``constraints`` bound packages without requiring them
    (the combo's companion constraints). ``preferred``: the packages of the previous lock,
    which the solver keeps where the specs allow (rattler's ``locked_packages``, as pixi uses
    them). Raises ``Unsatisfiable`` with the solver's text."""
    parsed = [match_spec(s) for s in specs]
    bounds = [match_spec(s) for s in constraints]

    async def run() -> list[RepoDataRecord]:
        gateway = rattler.Gateway()
        locked = await _channel_records(gateway, channels, platform, preferred)
        return await rattler.solve(
            sources=list(channels),
            specs=parsed,
            gateway=gateway,
            platforms=[platform, "noarch"],
            locked_packages=locked or None,
            virtual_packages=_virtual(virtual_packages),
            constraints=bounds or None,
        )

    try:
        records = asyncio.run(run())
    except SolverError as exc:
        raise Unsatisfiable(str(exc)) from None
    except GatewayError as exc:
        raise ToolError(
            f"cannot read the channels {', '.join(channels)}: {exc}",
            "check the channel map (--channel-map NAME=URL); a local channel needs "
            "<subdir>/repodata.json and noarch/repodata.json",
        ) from None
    return sorted((_locked(r, platform) for r in records), key=lambda p: p.name)


async def _channel_records(
    gateway: rattler.Gateway,
    channels: Sequence[str],
    platform: Platform,
    packages: Sequence[LockedPackage],
) -> list[RepoDataRecord]:
    """The channels' own records of the previous lock's conda packages: same subdir, file name
    and hash. rattler takes a locked record as a candidate even when no channel offers it (a
    file deleted upstream, a channel no longer mapped) and returns it as it was given; a lock
    reads neither ``constrains`` nor the channel's exact ``depends``, so the record handed to
    the solver is always the channel's. A package no channel holds any more is not preferred:
    it moves."""
    wanted = {(p.subdir, p.filename): p for p in packages if p.manager == "conda"}
    if not wanted:
        return []
    names = sorted({p.name for p in wanted.values()})
    groups = await gateway.query(list(channels), [platform, "noarch"], names, recursive=False)
    out: list[RepoDataRecord] = []
    for group in groups:
        for record in group:
            pkg = wanted.pop((str(record.subdir), str(record.file_name)), None)
            if pkg is None:
                continue
            if _same_file(pkg, record):
                out.append(record)
            else:
                wanted[(pkg.subdir, pkg.filename)] = pkg  # another channel may hold the file
    return out


def _same_file(pkg: LockedPackage, record: RepoDataRecord) -> bool:
    if pkg.sha256 and record.sha256:
        return bool(pkg.sha256 == record.sha256.hex())
    if pkg.md5 and record.md5:
        return bool(pkg.md5 == record.md5.hex())
    return False


def offered_versions(
    names: Sequence[str], channels: Sequence[str], platform: Platform
) -> dict[str, list[str]]:
    """The versions of each package the channels hold for ``platform`` (and noarch), oldest
    first; empty when the channels cannot be read (the caller is already explaining a failure)."""
    wanted = sorted(set(names))

    async def run() -> list[list[RepoDataRecord]]:
        result = await rattler.Gateway().query(
            list(channels), [platform, "noarch"], wanted, recursive=False
        )
        return [list(group) for group in result]

    try:
        groups = asyncio.run(run())
    except (GatewayError, InvalidMatchSpecError, ValueError):
        return {}
    found: dict[str, set[str]] = {n: set() for n in wanted}
    for group in groups:
        for record in group:
            name = record.name.normalized
            if name in found:
                found[name].add(str(record.version))
    return {n: sorted(v, key=Version) for n, v in found.items()}


def _locked(record: RepoDataRecord, platform: Platform) -> LockedPackage:
    return LockedPackage(
        manager="conda",
        name=record.name.normalized,
        version=str(record.version),
        platform=platform,
        url=str(record.url),
        build=str(record.build),
        build_number=int(record.build_number),
        subdir=str(record.subdir),
        channel=str(record.channel or ""),
        md5=record.md5.hex() if record.md5 else None,
        sha256=record.sha256.hex() if record.sha256 else None,
        depends=tuple(record.depends),
    )


def matches(spec: str, package: LockedPackage) -> bool:
    """Whether a conda dependency string is satisfied by ``package``."""
    ms = match_spec(spec)
    return bool(ms.matches(_record(package)))


def _record(pkg: LockedPackage) -> RepoDataRecord:
    subdir = pkg.subdir or pkg.url.rsplit("/", 2)[-2]
    record = PackageRecord(
        name=pkg.name,
        version=pkg.version,
        build=BuildString(pkg.build),
        build_number=pkg.build_number,
        subdir=subdir,
        depends=list(pkg.depends),
        md5=bytes.fromhex(pkg.md5) if pkg.md5 else None,
        sha256=bytes.fromhex(pkg.sha256) if pkg.sha256 else None,
    )
    channel = pkg.channel or pkg.url.rsplit("/", 2)[0]
    return RepoDataRecord(record, pkg.filename, pkg.url, channel)


def dependency_names(pkg: LockedPackage) -> list[str]:
    return [dependency_name(d) for d in pkg.depends]


def install(
    packages: Sequence[LockedPackage],
    prefix: Path,
    platform: Platform,
    cache_dir: Path,
    final_prefix: Path | None = None,
) -> None:
    """Link exactly ``packages`` (conda) into ``prefix`` as a ``platform`` environment from the
    package cache at ``cache_dir``, which must hold every one of them already (``pkgcache``
    checked each entry on its way in, so rattler's own validation is skipped: it would hash
    every file again). ``final_prefix`` is the path patched into files when ``prefix`` is a
    staging directory. rattler hard-links from the cache and copies where it cannot."""
    from rattler.package_cache import PackageCache, PackageCacheLayer, ValidationMode

    records = [_record(p) for p in packages]
    layer = PackageCacheLayer(cache_dir).with_validation_mode(ValidationMode.skip())

    async def run() -> None:
        await rattler.install(
            records,
            target_prefix=prefix,
            package_cache=PackageCache.from_layers([layer]),
            platform=Subdir(platform),
            show_progress=False,
            execute_link_scripts=False,
            alternative_target_prefix=final_prefix,
        )

    try:
        asyncio.run(run())
    except InstallerError as exc:
        import errno

        from envfactory.cache.unpack import disk_full, os_error_of

        if os_error_of(str(exc)) in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full("linking the packages", final_prefix or prefix) from None
        raise ToolError(f"installing into {prefix} failed: {exc}") from None


def index_channel(directory: Path) -> None:
    """Write ``repodata.json`` for every subdir of a local channel (``noarch/`` is created:
    solvers want it even when it is empty). rattler reads each archive's ``info/index.json``."""
    import rattler.index

    (directory / "noarch").mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(
            rattler.index.index_fs(directory, write_zst=False, write_shards=False, force=True)
        )
    except Exception as exc:  # rattler raises its own exception types, not one base class
        raise ToolError(f"indexing {directory} failed: {exc}") from None
