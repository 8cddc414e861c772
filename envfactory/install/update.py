"""Update an environment in place from a newer lock (``create --update``): only what differs is
unlinked and linked, under a rollback journal (``journal.py``), so that a failure, an interrupt or
a kill -9 leaves (or gives back) the old environment as it was.

1. before anything is written, everything ``create`` checks of a lock is checked (it is untrusted
   input, ``create.lock_packages``), the pip files of the update are fetched and checked, and
   the plan is made: the conda packages the prefix keeps (same name, version, build and file
   hash, linked from the cache entry of that hash, whose files still have the size, mtime and
   inode its summary records; the noarch: python ones only while python's X.Y stays: their
   files live under ``lib/pythonX.Y``) and the pip distributions it keeps
   (same name and version, python's X.Y unchanged); what the others installed, as their
   ``conda-meta`` records and pip ``RECORD`` files list it (each path relative, inside the
   prefix, under no link), and envfactory's own files (activation scripts, ``conda-meta/state``,
   the marker) are what the update takes away;
2. the journal is made inside the prefix, and its ``new/`` directory is filled as ``create``
   fills a staging directory, but with the new and changed packages only (only they are
   leased from the cache, and checked there as ``create`` checks every package): rattler links the
   conda ones from the checked cache entries (the final prefix patched into files; a copy of
   the kept python record tells it which python the noarch: python packages are for), then the
   pip files, the activation files, ``conda-meta/state`` and the marker, following the lock;
3. the journal records the paths that leave and the paths that come, and applies them, renames
   only (``Journal.apply``); then the post-link check of ``create`` runs over the whole prefix
   (every conda file, kept or linked, is the cache entry's inode or has its listed hash;
   ``conda-meta`` holds exactly the lock's records); only then is the update committed and the
   old files removed. Any failure or interrupt until then undoes it.

The files of the packages the prefix keeps are not touched: not linked again, not moved.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from envfactory import ownfiles
from envfactory.cache.lease import Lease
from envfactory.cache.pathcheck import (
    Linked,
    UnsafePackage,
    check_all_relative,
    check_installed,
    check_links_across,
)
from envfactory.cache.pkgcache import CacheProgress, PackageCache, saying_waits
from envfactory.cache.staging import INTERRUPTS, handling, interrupts_deferred
from envfactory.cache.summary import read_summary, stamps_hold
from envfactory.catalog.platforms import Platform
from envfactory.errors import UserInputError
from envfactory.install.create import (
    MARKER,
    CreateResult,
    Interrupted,
    LockPackages,
    _activation,
    _apply_umask,
    _import_the_rest,
    _interrupt,
    _point_records_at_entries,
    _python_of,
    _to_the_end,
    _umask,
    _write_state,
    lock_packages,
    write_marker,
)
from envfactory.install.journal import Journal, recover
from envfactory.lockfile.diff import LockDiff, LockSide, compare
from envfactory.lockfile.models import LockedPackage
from envfactory.lockfile.record import LockMetadata
from envfactory.progress import Progress
from envfactory.solve.channels import ChannelMap

if TYPE_CHECKING:
    from envfactory.install.pipside import Prepared

Record = tuple[Path, dict[str, Any]]


class UpdateResult(NamedTuple):
    created: CreateResult
    changes: LockDiff
    kept: int  # conda packages the prefix kept: not linked again


@dataclass(frozen=True)
class PackageSources:
    """Where an update takes the packages it links from: the package cache (the user's by
    default), a channel map (a mirror), a local pip index, and the sdists it may build."""

    cache: PackageCache | None = None
    channel_map: ChannelMap | None = None
    wheel_dir: Path | None = None
    allow_build: Sequence[str] = ()


class _Dist(NamedTuple):
    """A pip distribution of the prefix (not one a conda package installed)."""

    name: str  # canonical
    version: str
    info: str  # its .dist-info directory, relative to the prefix


# envfactory's own files in a prefix, which every update writes anew from the lock
_OWN_DIRECTORIES = ("etc/conda/envfactory",)
_OWN_STUBS = ("etc/conda/activate.d", "etc/conda/deactivate.d")
_OWN_META = (f"conda-meta/{MARKER}", "conda-meta/state")
# what rattler writes into each prefix it links into, whatever the packages
_RATTLER_OWN = ("CACHEDIR.TAG", "conda-meta/history")


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
    say = progress or (lambda _m: None)
    prefix = prefix.expanduser().absolute()
    if prefix.is_symlink():  # every path below is checked to be under no link: the prefix too
        raise UserInputError(
            f"{prefix} is a symbolic link",
            "pass the directory it points to: the environment is updated in place",
        )
    recover(prefix, say)  # an update that died here is undone first: its marker is the old one
    cache = sources.cache or PackageCache()
    plan = _plan(lock_path, prefix, platform, sources, cache)
    say(
        f"updating {prefix} in place: {len(plan.kept)} conda packages kept, "
        f"{len(plan.linking)} to link, {plan.unlinked} to unlink"
    )
    pip_files = None
    if plan.wheels:
        from envfactory.install import pipside

        say(f"{len(plan.wheels)} pip files: checking them into the cache {cache.root}")
        pip_files = pipside.prepare(
            plan.wheels,
            cache.root,
            platform=plan.target,
            allow_build=sources.allow_build,
            say=say,
            index=plan.packages.wheel_dir,
        )
    umask = _umask()
    try:
        with handling(INTERRUPTS - {signal.SIGINT}, _interrupt):
            journal = Journal.start(prefix, say)
            try:
                # only what is linked is leased from the cache; the kept packages were held to
                # their entries' summaries when planned (``_kept``)
                leased = [pkg for pkg, _ in plan.linking]
                say(f"{len(leased)} conda packages: checking them into the cache {cache.root}")
                with cache.acquire(leased, saying_waits(cache_progress, say)) as lease:
                    _check_together(plan, leased, lease, journal.new, pip_files)
                    activation, note = _fill(journal.new, plan, lease, pip_files, umask, say)
                    # what the post-link check holds each record in conda-meta/ to
                    linked = dict(plan.kept)
                    linked.update({c.name: Linked(str(c.directory), c.summary) for c in lease})
                    hits = len(plan.kept) + sum(1 for c in lease if c.outcome == "cached")
                    _apply(journal, [*plan.aside, *_own_files(prefix)], linked)
            except BaseException:
                with interrupts_deferred():
                    journal.rollback()
                raise
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
    say(f"updated {prefix}")
    created = CreateResult.of(
        prefix,
        plan.target,
        (len(plan.packages.conda), len(plan.packages.wheels)),
        tuple(prefix / p.relative_to(journal.new) for p in activation),
        note,
        None,
        hits,
        pip_files,
    )
    return UpdateResult(created, plan.changes, len(plan.kept))


class _Plan(NamedTuple):
    """What an update does, decided before anything is written."""

    lock_path: Path
    prefix: Path
    target: Platform
    meta: LockMetadata
    packages: LockPackages
    changes: LockDiff
    kept: dict[str, Linked]  # record name (name-version-build) -> the entry it is held to
    python_record: Path | None  # the kept python's record, when python is kept
    linking: list[tuple[LockedPackage, LockedPackage]]  # relocated, and as conda-meta has it
    unlinked: int  # conda packages unlinked
    wheels: list[LockedPackage]  # the pip files to install
    aside: list[str]  # the paths of what is unlinked and uninstalled


def _plan(
    lock_path: Path,
    prefix: Path,
    platform: Platform | None,
    sources: PackageSources,
    cache: PackageCache,
) -> _Plan:
    """The lock read and checked, the prefix read, what stays and what goes."""
    from envfactory.lockfile.read import read_lock

    recorded = _marker(prefix)
    target = cast(Platform, recorded["platform"])  # parse_marker: one of PLATFORMS
    if platform is not None and platform != target:
        raise UserInputError(
            f"{prefix} is a {target} environment, not {platform}",
            "drop --platform, or create a new environment for the other platform",
        )
    lock = read_lock(lock_path, memo=cache.memo)
    packages = lock_packages(lock, lock_path, target, sources.channel_map, sources.wheel_dir)
    wanted = [p for p in lock.packages if p.platform == target]
    records = _records(prefix)
    dists = _pip_dists(prefix, records)
    changes = compare(
        _installed(prefix, target, wanted, records, dists),
        LockSide(str(lock_path), {target: tuple(wanted)}, {}),
    )
    python_moves = _python(r for _, r in records) != _python(
        {"name": p.name, "version": p.version} for p in wanted if p.manager == "conda"
    )
    keep = _kept(records, wanted, cache, python_moves)
    kept = {path.name[: -len(".json")]: proof for path, _, proof in keep}
    drop = [(path, rec) for path, rec in records if path.name[: -len(".json")] not in kept]
    pip_kept = _pip_kept(dists, wanted, python_moves)
    return _Plan(
        lock_path=lock_path,
        prefix=prefix,
        target=target,
        meta=lock.metadata,
        packages=packages,
        changes=changes,
        kept=kept,
        python_record=next((p for p, r, _ in keep if r.get("name") == "python"), None),
        linking=[
            (pkg, rec)
            for pkg, rec in zip(packages.conda, packages.locked, strict=True)
            if f"{pkg.name}-{pkg.version}-{pkg.build}" not in kept
        ],
        unlinked=len(drop),
        wheels=[w for w in packages.wheels if _canonical(w.name) not in pip_kept],
        aside=_aside(prefix, drop, [d for d in dists if d.name not in pip_kept], records),
    )


def _check_together(
    plan: _Plan,
    leased: Sequence[LockedPackage],
    lease: Lease,
    new: Path,
    pip_files: Prepared | None,
) -> None:
    """The checks ``create`` makes of the packages together before linking: no file under
    another package's symlink (the kept ones included), and Windows' path limit for what is
    written into the journal (its ``new/`` and ``old/`` are the longest paths)."""
    from envfactory.install import longpaths

    across = {
        pkg.describe(): (c.directory, c.summary) for pkg, c in zip(leased, lease, strict=True)
    }
    for name, proof in plan.kept.items():  # _kept keeps only summarized entries
        if proof.summary is not None:
            across[name] = (Path(proof.source), proof.summary)
    check_links_across(across)
    longpaths.check_create(
        new,
        plan.prefix,
        (c.directory for c in lease),
        (tree.manifest for _pkg, tree in (pip_files.wheels if pip_files else ())),
    )


def _fill(
    new: Path,
    plan: _Plan,
    lease: Lease,
    pip_files: Prepared | None,
    umask: int,
    say: Progress,
) -> tuple[list[Path], str | None]:
    """The journal's ``new/`` filled as ``create`` fills a staging directory, with the new and
    changed packages only: the activation files it installed, and create's note on them."""
    from envfactory.solve import rattler_adapter

    meta, prefix = plan.meta, plan.prefix
    if plan.linking:
        say(f"linking {len(plan.linking)} conda packages")
        records = [rec for _, rec in plan.linking]
        seeded = plan.python_record
        if seeded is not None:
            # rattler reads new/conda-meta: python is there, not linked again, and the
            # noarch: python packages go under its site-packages
            ownfiles.write_file(new, f"conda-meta/{seeded.name}", ownfiles.read_file(seeded) or b"")
            records += [p for p in plan.packages.locked if p.name == "python"]
        _to_the_end(
            lambda: rattler_adapter.install(
                records, new, plan.target, lease.view, final_prefix=prefix
            ),
            meanwhile=_import_the_rest if meta.activation or meta.combo else None,
        )
        if seeded is not None:
            (new / "conda-meta" / seeded.name).unlink()
        names = {f"{p.name}-{p.version}-{p.build}" for p, _ in plan.linking}
        _point_records_at_entries(
            new, {c.name: (lease.source(c), str(c.directory)) for c in lease if c.name in names}
        )
    if pip_files is not None:
        from envfactory.install import pipside

        say(f"installing {len(plan.wheels)} pip packages")
        requirements = meta.inputs.get(plan.target, {}).get("pip") or []
        python = meta.python or _python_of(plan.packages.conda)
        pipside.install(
            pip_files,
            new,
            prefix,
            plan.target,
            python,
            pipside.requested([str(r) for r in requirements]),
        )
    activation, note = _activation(meta, str(plan.lock_path), new, plan.target)
    if meta.variables:
        _write_state(new, dict(meta.variables))
    write_marker(new, meta, plan.lock_path, plan.target)
    _apply_umask(new, activation, umask)
    for rel in _RATTLER_OWN:  # what rattler writes into every prefix: the prefix's are kept
        if os.path.lexists(prefix / rel) and os.path.lexists(new / rel):
            (new / rel).unlink()
    return activation, note


def _apply(journal: Journal, aside: Sequence[str], linked: Mapping[str, Linked]) -> None:
    """The renames, the post-link check of the whole prefix, the commit. An interrupt is held
    back until the renames and the check are done; the update is then undone."""
    came: list[int] = []
    with handling(INTERRUPTS, lambda signum, _frame: came.append(signum)):
        journal.apply(aside, _incoming(journal.new))
        check_installed(journal.prefix, linked)
        if came:
            raise Interrupted(signal.Signals(came[0]).name)
        journal.commit()


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


def _records(prefix: Path) -> list[Record]:
    from envfactory.install.verify import read_record

    meta = prefix / "conda-meta"
    return [(p, read_record(p)) for p in sorted(meta.glob("*.json")) if p.name != MARKER]


def _installed(
    prefix: Path,
    platform: Platform,
    wanted: Sequence[LockedPackage],
    records: Sequence[Record],
    dists: Sequence[_Dist],
) -> LockSide:
    """The environment as a side of a comparison: its conda records, and its pip
    distributions (by name and version: a pip package that the lock holds at the same version
    is the lock's file)."""
    packages: list[LockedPackage] = []
    for _, rec in records:
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
    pip = {_canonical(p.name): p for p in wanted if p.manager == "pip"}
    for dist in dists:
        locked = pip.get(dist.name)
        if locked is not None and locked.version == dist.version:
            packages.append(locked)
        else:  # where an installed distribution came from is not recorded: shown as the lock's
            url = locked.url if locked is not None else "installed"
            packages.append(LockedPackage("pip", dist.name, dist.version, platform, url=url))
    return LockSide(str(prefix), {platform: tuple(packages)}, {})


def _kept(
    records: Sequence[Record],
    wanted: Sequence[LockedPackage],
    cache: PackageCache,
    python_moves: bool,
) -> list[tuple[Path, dict[str, Any], Linked]]:
    """The prefix's records of conda packages the lock still holds, byte for byte (same
    file hash), linked from the entry the cache holds for them now, with that entry (the
    post-link check holds every record to it). An entry that has no summary, or whose files
    no longer have the size, mtime and inode they had when it was checked, is not kept: its
    package is linked anew, through the cache's checks."""
    locked = {(p.name, p.version, p.build): p for p in wanted if p.manager == "conda"}
    out = []
    for path, rec in records:
        pkg = locked.get((str(rec["name"]), str(rec["version"]), str(rec.get("build", ""))))
        if pkg is None:
            continue
        if not pkg.sha256 or rec.get("sha256") != pkg.sha256:
            continue  # entries are named by sha256 (an md5-only lock's package: linked anew)
        entry = cache.entry(pkg.sha256)
        if python_moves and _noarch_python(rec, entry):
            continue  # its files go under the new python's site-packages: linked anew
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
        if path.name != f"{pkg.name}-{pkg.version}-{pkg.build}.json":
            continue  # not where rattler puts its record: linked anew
        summary = read_summary(entry.parent, pkg.sha256)
        if summary is None or not stamps_hold(entry, summary):
            continue
        out.append((path, rec, Linked(os.fspath(entry), summary)))
    return out


def _noarch_python(rec: Mapping[str, Any], entry: Path) -> bool:
    """Whether a record is of a noarch: python package. The records rattler writes from a lock
    carry no ``noarch`` field (the lock has none): the package's own ``info/index.json`` in its
    cache entry says it (checked against the lock on its way into the cache)."""
    if rec.get("noarch") == "python":
        return True
    if rec.get("subdir") != "noarch":
        return False
    try:
        index = json.loads(ownfiles.read_file(entry / "info" / "index.json") or b"{}")
    except ValueError:
        return True  # unreadable: linked anew, which is always right
    noarch = index.get("noarch") if isinstance(index, dict) else None
    return noarch == "python" or (isinstance(noarch, dict) and noarch.get("type") == "python")


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


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def _pip_dists(prefix: Path, records: Sequence[Record]) -> list[_Dist]:
    """The pip distributions of the prefix: each ``.dist-info`` of a site-packages that no
    conda record lists (as ``verify`` finds them)."""
    conda_owned: set[str] = set()
    for _, rec in records:
        conda_owned.update(f for f in rec.get("files", []) if isinstance(f, str))
    out = []
    found = [
        *prefix.glob("lib/python*/site-packages/*.dist-info/METADATA"),  # unix
        *prefix.glob("Lib/site-packages/*.dist-info/METADATA"),  # windows
    ]
    for metadata in sorted(found):
        relative = metadata.relative_to(prefix).as_posix()
        if relative in conda_owned:
            continue
        fields: dict[str, str] = {}
        text = ownfiles.read_file(metadata) or b""
        for line in text.decode("utf-8", "replace").splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        if "Name" not in fields or "Version" not in fields:
            raise UserInputError(
                f"{metadata} names no distribution (no Name or Version)",
                f"the environment is damaged: rebuild it: envfactory create --force -p {prefix}",
            )
        out.append(
            _Dist(_canonical(fields["Name"]), fields["Version"], relative.rpartition("/")[0])
        )
    return out


def _pip_kept(
    dists: Sequence[_Dist], wanted: Sequence[LockedPackage], python_moves: bool
) -> set[str]:
    """The pip distributions the prefix keeps: the lock's name and version, python's X.Y
    unchanged (the files live under ``lib/pythonX.Y``)."""
    if python_moves:
        return set()
    pip = {_canonical(p.name): p.version for p in wanted if p.manager == "pip"}
    names = [d.name for d in dists]
    return {d.name for d in dists if pip.get(d.name) == d.version and names.count(d.name) == 1}


def _aside(
    prefix: Path, drop: Sequence[Record], dists: Sequence[_Dist], records: Sequence[Record]
) -> list[str]:
    """What the update takes away, relative to the prefix: the paths of each conda package it
    unlinks and their records, and the files of each pip distribution it uninstalls (its
    ``RECORD``, its ``.dist-info``, the bytecode Python wrote for its modules). Each path is
    checked to be relative and inside the prefix: a prefix is untrusted input."""
    out: list[str] = []
    listings: dict[str, list[str]] = {}
    for path, rec in drop:
        what = f"{rec['name']} {rec['version']} {rec.get('build', '')}".strip()
        listed = _paths(rec)
        paths = (
            [rel for rel, kind in listed if kind != "directory"]
            if listed is not None
            else [f for f in rec.get("files", []) if isinstance(f, str)]
        )
        try:
            check_all_relative(what, paths)
            own = next((rel for rel in paths if ownfiles.is_own_path(rel)), None)
            if own is not None:
                raise UnsafePackage(f"{what} lists {own}, one of envfactory's own paths", "")
        except UnsafePackage as exc:
            raise UserInputError(
                f"{prefix}/conda-meta/{path.name}: {exc.message}",
                f"the environment's record is damaged or crafted; rebuild it: envfactory create "
                f"--force -p {prefix}",
            ) from None
        out += paths
        # the bytecode Python (or create --compile) wrote for its modules, listed nowhere
        out += [b for rel in paths for b in _bytecode(prefix, rel, listings)]
        out.append(f"conda-meta/{path.name}")
    conda_owned: set[str] = set()
    for _, rec in records:
        conda_owned.update(f for f in rec.get("files", []) if isinstance(f, str))
    for dist in dists:
        # never a conda package's file, nor envfactory's own, whatever a RECORD says
        out += [
            p
            for p in _dist_files(prefix, dist)
            if p not in conda_owned and not ownfiles.is_own_path(p)
        ]
    return list(dict.fromkeys(out))


def _dist_files(prefix: Path, dist: _Dist) -> Iterator[str]:
    """The files of a pip distribution, relative to the prefix: its RECORD's (relative to its
    site-packages) with their bytecode, and everything in its .dist-info."""
    site = dist.info.rpartition("/")[0]
    data = ownfiles.read_file(prefix / dist.info / "RECORD") or b""
    for row in csv.reader(io.StringIO(data.decode("utf-8", "replace"))):
        if not row or not row[0]:
            continue
        rel = os.path.normpath(f"{site}/{row[0]}").replace(os.sep, "/")
        if rel.startswith(("../", "/")) or rel == ".." or Path(row[0]).is_absolute():
            raise UserInputError(
                f"{prefix / dist.info / 'RECORD'} lists {row[0]!r}, outside {prefix}",
                f"the distribution's RECORD is damaged or crafted; rebuild the environment: "
                f"envfactory create --force -p {prefix}",
            )
        yield rel
        yield from _bytecode(prefix, rel)
    for root, dirs, files in os.walk(prefix / dist.info):
        here = Path(root).relative_to(prefix).as_posix()
        for name in [*files, *(d for d in dirs if (Path(root) / d).is_symlink())]:
            yield f"{here}/{name}"


def _bytecode(prefix: Path, rel: str, seen: dict[str, list[str]] | None = None) -> list[str]:
    """The ``__pycache__`` files of the module ``rel`` (none unless it is a ``.py``);
    ``seen``: the listings of the ``__pycache__`` directories read so far."""
    if not rel.endswith(".py"):
        return []
    folder, _, name = rel.rpartition("/")
    cache = f"{folder}/__pycache__" if folder else "__pycache__"
    listings = {} if seen is None else seen
    if cache not in listings:
        try:
            listings[cache] = sorted(p.name for p in (prefix / cache).iterdir())
        except OSError:
            listings[cache] = []
    stem = name[: -len(".py")] + "."
    return [f"{cache}/{f}" for f in listings[cache] if f.startswith(stem) and f.endswith(".pyc")]


def _own_files(prefix: Path) -> list[str]:
    """envfactory's own files in the prefix (activation scripts, the marker, conda-meta/state),
    which the update writes anew."""
    out = [rel for rel in _OWN_META if os.path.lexists(prefix / rel)]
    for directory in _OWN_DIRECTORIES:
        if (prefix / directory).is_dir() and not (prefix / directory).is_symlink():
            out += _walk(prefix / directory, prefix)
    for directory in _OWN_STUBS:
        folder = prefix / directory
        if folder.is_dir() and not folder.is_symlink():
            out += [
                f"{directory}/{p.name}"
                for p in sorted(folder.iterdir())
                if p.name.startswith("envfactory-")
            ]
    return out


def _walk(root: Path, relative_to: Path) -> list[str]:
    """The files, symbolic links and empty directories under ``root``, never followed."""
    out = []
    for here, dirs, files in os.walk(root):
        base = Path(here).relative_to(relative_to).as_posix()
        links = [d for d in dirs if (Path(here) / d).is_symlink()]
        out += [f"{base}/{name}" for name in sorted([*files, *links])]
        if not dirs and not files and Path(here) != root:
            out.append(base)
    return out


def _incoming(new: Path) -> list[str]:
    """What ``new/`` brings into the prefix, package files first, conda-meta/ last (its marker
    the very last)."""
    paths = [p[len("./") :] if p.startswith("./") else p for p in _walk(new, new)]
    return sorted(
        paths,
        key=lambda p: (p.startswith("conda-meta/"), p == f"conda-meta/{MARKER}", p),
    )


def describe(changes: LockDiff) -> list[str]:
    """The lines ``create --update`` prints: the change per platform, as ``diff`` prints it."""
    from envfactory.lockfile.diff import to_text

    return to_text(changes, header=False)
