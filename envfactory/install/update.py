"""Update an environment in place from a newer lock (``create --update``): only what differs is
linked, and a failure leaves the old environment as it was.

The new environment is built beside the old one, as ``create`` builds every environment, and
swapped in with one ``renameat2(RENAME_EXCHANGE)`` (``create._move_into_place``); until then the
old prefix is never written. What makes it fast is what the staging directory starts with: the
conda packages the old prefix and the new lock share (same name, version, build and hash,
linked from the same cache entry) are *seeded* into it as hard links to the old prefix's files,
which are the cache's own inodes, with a copy of their ``conda-meta`` records. rattler's
installer then reads the staging directory's ``conda-meta/``, finds them installed, and links
only the packages that are new or changed. A package that leaves the lock is simply not seeded:
nothing is unlinked, so no file the old prefix shares is ever removed or rewritten. The seeded
records are copies (``create`` sets their mode), the activation files, ``conda-meta/state``,
the marker and the pip side are written anew from the lock, so they follow it.

Every check of ``create`` runs as for a new environment: each package of the lock passes the
package cache; the post-link check proves every conda file, seeded or linked, is the cache's
inode or has its listed hash; ``conda-meta/`` holds exactly the lock's records.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, cast

from envfactory.cache.pathcheck import UnsafePackage, check_all_relative
from envfactory.cache.pkgcache import CacheProgress, PackageCache
from envfactory.catalog.platforms import Platform
from envfactory.errors import UserInputError
from envfactory.install.create import MARKER, CreateResult, create_environment
from envfactory.lockfile.diff import LockDiff, LockSide, compare
from envfactory.lockfile.models import LockedPackage
from envfactory.progress import Progress
from envfactory.solve.channels import ChannelMap


class UpdateResult(NamedTuple):
    created: CreateResult
    changes: LockDiff
    kept: int  # conda packages seeded from the old prefix, not linked again


@dataclass(frozen=True)
class PackageSources:
    """Where an update takes the packages it links from: the package cache (the user's by
    default), a channel map (a mirror), a local pip index, and the sdists it may build."""

    cache: PackageCache | None = None
    channel_map: ChannelMap | None = None
    wheel_dir: Path | None = None
    allow_build: Sequence[str] = ()


def update_environment(
    lock_path: Path,
    prefix: Path,
    sources: PackageSources = PackageSources(),
    *,
    platform: Platform | None = None,
    progress: Progress | None = None,
    cache_progress: CacheProgress | None = None,
) -> UpdateResult:
    """Bring the environment at ``prefix`` (made by ``envfactory create``) to ``lock_path``."""
    from envfactory.lockfile.read import read_lock

    say = progress or (lambda _m: None)
    prefix = prefix.expanduser().absolute()
    recorded = _marker(prefix)
    target = cast(Platform, recorded["platform"])  # parse_marker: one of PLATFORMS
    if platform is not None and platform != target:
        raise UserInputError(
            f"{prefix} is a {target} environment, not {platform}",
            "drop --platform, or create a new environment for the other platform",
        )
    cache = sources.cache or PackageCache()
    lock = read_lock(lock_path, memo=cache.memo)
    wanted = [p for p in lock.packages if p.platform == target]
    old = _installed(prefix, target, wanted)
    changes = compare(old, LockSide(str(lock_path), {target: tuple(wanted)}, {}))
    keep = _kept(prefix, wanted, cache)
    say(f"updating {prefix}: {len(keep)} conda packages kept, the rest linked from the cache")

    def seed(staging: Path) -> None:
        _seed(prefix, staging, keep)

    try:
        created = create_environment(
            lock_path,
            prefix,
            force=True,
            platform=target,
            cache=cache,
            progress=progress,
            channel_map=sources.channel_map,
            wheel_dir=sources.wheel_dir,
            cache_progress=cache_progress,
            allow_build=sources.allow_build,
            seed=seed,
            contents=lock,
        )
    except UnsafePackage as exc:
        if "after linking" not in exc.message:
            raise
        # the post-link check refused a kept file: one that was edited in the environment
        raise UnsafePackage(
            exc.message,
            f"{prefix} is unchanged; a file of it was changed after it was created: "
            f"'envfactory verify {prefix}' names each one; restore them, or build the "
            "environment anew with --force instead of --update",
        ) from None
    return UpdateResult(created, changes, len(keep))


def _marker(prefix: Path) -> dict[str, str]:
    from envfactory import untrusted
    from envfactory.catalog.platforms import PLATFORMS

    marker = prefix / "conda-meta" / MARKER
    if not marker.is_file():
        what = "does not exist" if not prefix.exists() else "was not made by envfactory create"
        raise UserInputError(
            f"{prefix} {what}, so there is nothing to update",
            "create it: envfactory create NAME -p PREFIX (--force replaces a conda environment "
            "that envfactory did not make)",
        )
    text = marker.read_bytes().decode("utf-8", "replace")
    return dict(untrusted.parse_marker(text, str(marker), PLATFORMS))


def _records(prefix: Path) -> list[tuple[Path, dict[str, Any]]]:
    from envfactory.install.verify import read_record

    meta = prefix / "conda-meta"
    return [(p, read_record(p)) for p in sorted(meta.glob("*.json")) if p.name != MARKER]


def _installed(prefix: Path, platform: Platform, wanted: Sequence[LockedPackage]) -> LockSide:
    """The environment as a side of a comparison: its conda records, and its pip
    distributions (by name and version: a pip package that the lock holds at the same version
    is the lock's file)."""
    from envfactory.install.verify import _pip_records

    packages: list[LockedPackage] = []
    for _, rec in _records(prefix):
        packages.append(
            LockedPackage(
                manager="conda",
                name=str(rec["name"]),
                version=str(rec["version"]),
                platform=platform,
                url=str(rec.get("url") or ""),
                build=str(rec.get("build") or ""),
                md5=rec.get("md5"),
                sha256=rec.get("sha256"),
            )
        )
    pip = {p.name: p for p in wanted if p.manager == "pip"}
    for dist in _pip_records(prefix):
        locked = pip.get(dist.name)
        if locked is not None and locked.version == dist.version:
            packages.append(locked)
        else:  # where an installed distribution came from is not recorded: shown as the lock's
            url = locked.url if locked is not None else "installed"
            packages.append(LockedPackage("pip", dist.name, dist.version, platform, url=url))
    return LockSide(str(prefix), {platform: tuple(packages)}, {})


def _kept(
    prefix: Path, wanted: Sequence[LockedPackage], cache: PackageCache
) -> list[tuple[Path, dict[str, Any]]]:
    """The old prefix's records of conda packages the lock still holds, byte for byte (same
    file hash), linked from the entry the cache holds for them now (``create``'s post-link
    check holds every record to that entry)."""
    locked = {(p.name, p.version, p.build): p for p in wanted if p.manager == "conda"}
    records = _records(prefix)
    python_moves = _python(r for _, r in records) != _python(
        {"name": p.name, "version": p.version} for p in wanted if p.manager == "conda"
    )
    out = []
    for path, rec in records:
        pkg = locked.get((str(rec["name"]), str(rec["version"]), str(rec.get("build", ""))))
        if pkg is None:
            continue
        if python_moves and rec.get("noarch") == "python":
            continue  # its files go under the new python's site-packages: linked anew
        if pkg.sha256 and rec.get("sha256") != pkg.sha256:
            continue
        if not pkg.sha256 and rec.get("md5") != pkg.md5:
            continue
        if not pkg.sha256:
            continue  # entries are named by sha256 (an md5-only lock's package: linked anew)
        entry = cache.entry(pkg.sha256)
        source = rec.get("extracted_package_dir") or (rec.get("link") or {}).get("source")
        if source is None or os.fspath(Path(source)) != os.fspath(entry):
            continue
        paths = _paths(rec)
        if paths is None:
            continue
        try:  # a prefix is untrusted input: a record's paths stay inside it
            check_all_relative(path.name, [rel for rel, _ in paths])
        except UnsafePackage:
            continue
        out.append((path, rec))
    return out


def _python(records: Iterable[Mapping[str, Any]]) -> str | None:
    """The python X.Y of a set of conda records (a noarch: python package's files move with
    it)."""
    for rec in records:
        if rec.get("name") == "python":
            return ".".join(str(rec.get("version")).split(".")[:2])
    return None


def _paths(rec: Mapping[str, Any]) -> list[tuple[str, str]] | None:
    """(relative path, path_type) of every path a record installs; None when it lists them in a
    shape this module does not know (that package is then linked anew)."""
    data = rec.get("paths_data")
    if not isinstance(data, dict) or not isinstance(data.get("paths"), list):
        return None
    out = []
    for entry in data["paths"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("_path"), str):
            return None
        out.append((entry["_path"], str(entry.get("path_type", "hardlink"))))
    return out


def _seed(old: Path, staging: Path, keep: Sequence[tuple[Path, dict[str, Any]]]) -> None:
    """Each kept package into ``staging``: its files as hard links to the old prefix's (its
    symlinks as symlinks), its record as a copy. A path missing from the old prefix is left
    out: the post-link check then reports the package, and nothing is moved."""
    meta = staging / "conda-meta"
    meta.mkdir(exist_ok=True)
    made: set[Path] = set()
    for record_path, rec in keep:
        for rel, kind in _paths(rec) or ():
            source, target = old / rel, staging / rel
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            if kind == "directory":
                target.mkdir(exist_ok=True)
            elif source.is_symlink():
                target.symlink_to(source.readlink())
            elif source.is_file():
                os.link(source, target)
        shutil.copyfile(record_path, meta / record_path.name)


def describe(changes: LockDiff) -> list[str]:
    """The lines ``create --update`` prints: the change per platform, as ``diff`` prints it."""
    from envfactory.lockfile.diff import to_text

    return to_text(changes, header=False)
