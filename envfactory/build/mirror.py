"""Mirror: the packages of a lock, downloaded, hash-checked and written as a local channel, so an
air-gapped machine can ``envfactory create ENV --channel-map NAME=file://DIR``.

Layout of DIR: ``<subdir>/<file>`` for conda packages with a ``repodata.json`` per subdir
(``rattler.index.index_fs``, through ``rattler_adapter``), and ``wheels/<file>`` for the pip
wheels (``create --pip-index DIR/wheels``).

Every file is written to ``<file>.part`` first and renamed only after its hash equals the
lock's sha256 (md5 when the lock has no sha256): a file under its final name is always whole.
A ``.part`` left by an interrupted run is resumed with an HTTP ``Range`` request; if the
resumed file's hash is wrong, it is downloaded once more from the start. ``file://`` sources are
copied. Files already in DIR with the right hash are kept, so running the command again only
fetches what is missing. A conda archive already in the shared package cache (``pkgcache``:
what ``create`` downloaded, or conda's ``CONDA_PKGS_DIRS``) with the lock's hash is copied
from there, and an archive downloaded here is linked into the cache for ``create``.

A lock is untrusted input: the subdirectory of a conda package must be a known conda platform
name (rattler's list) and every file name a plain archive or wheel name, so nothing is written
outside DIR.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from envfactory.build.checks import LockedPackage
from envfactory.build.create import verify_file
from envfactory.build.lockmeta import LockMetadata
from envfactory.build.pkgcache import PackageCache, local_path
from envfactory.catalog.model import Platform
from envfactory.errors import ToolError, UserInputError
from envfactory.progress import Progress, SilentTransfer, Transfer

if TYPE_CHECKING:
    import requests

Outcome = Literal["kept", "downloaded", "resumed", "copied", "cached"]
WHEELS_DIR = "wheels"
CHUNK = 1 << 16  # what an interrupted download loses at most
TIMEOUT_S = 60


@dataclass(frozen=True)
class MirrorResult:
    directory: Path
    lock: Path
    platforms: tuple[Platform, ...]
    outcomes: dict[str, Outcome]  # relative path in DIR -> what happened to it
    channels: dict[str, str]  # channel name -> URL at lock time (what --channel-map replaces)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)

    @property
    def has_wheels(self) -> bool:
        return any(path.startswith(f"{WHEELS_DIR}/") for path in self.outcomes)

    def create_command(self, target: str) -> str:
        """The command that builds the environment from this mirror alone."""
        url = self.directory.resolve().as_uri()
        parts = [f"envfactory create {target}"]
        parts += [f"--channel-map {name}={url}" for name in self.channels]
        if self.has_wheels:
            parts.append(f"--pip-index {self.directory.resolve() / WHEELS_DIR}")
        return " ".join(parts)


_WHEEL = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+!\-]*\.whl\Z")


def known_subdirs() -> frozenset[str]:
    from rattler import Subdir

    return frozenset(str(p) for p in Subdir.all())


def relative_path(pkg: LockedPackage) -> str:
    """Where ``pkg`` goes in the mirror; refused unless it is ``<known subdir>/<archive>`` or
    ``wheels/<wheel>`` (the lock's URL must not choose a path outside DIR)."""
    if pkg.manager == "pip":
        if not _WHEEL.match(pkg.filename):
            raise UserInputError(
                f"{pkg.describe()}: {pkg.filename!r} is not a wheel file name",
                "the lock is damaged or crafted; re-lock it",
            )
        return f"{WHEELS_DIR}/{pkg.filename}"
    from envfactory.build.pkgcache import archive_name

    subdir = pkg.subdir or pkg.url.rsplit("/", 2)[-2]
    if subdir not in known_subdirs():
        raise UserInputError(
            f"{pkg.describe()}: subdir {subdir!r} (from {pkg.url}) is not a conda platform",
            "a conda package lives under noarch/, linux-64/, win-64/, ...; the lock is "
            "damaged or crafted: re-lock it",
        )
    return f"{subdir}/{archive_name(pkg)}"


def mirror_lock(
    lock_path: Path,
    directory: Path,
    *,
    platforms: Sequence[Platform] = (),
    progress: Progress | None = None,
    cache: PackageCache | None = None,
    transfer: Transfer | None = None,
) -> MirrorResult:
    """Download exactly the packages of ``lock_path`` (all its platforms unless ``platforms``),
    check each against the lock's hash, and index ``directory`` as a channel."""
    from envfactory.build import rattler_adapter
    from envfactory.build.lockfile import read_lock

    say = progress or (lambda _m: None)
    lock = read_lock(lock_path)
    chosen = tuple(platforms) or lock.platforms
    for platform in chosen:
        if platform not in lock.platforms:
            raise UserInputError(
                f"{lock_path} has no packages for {platform} (it covers "
                f"{', '.join(lock.platforms)})",
                "leave out --platform to mirror every platform of the lock",
            )
    wanted: dict[str, LockedPackage] = {}
    for pkg in lock.packages:
        if pkg.platform in chosen:
            # a noarch package is listed once per platform: one file
            wanted.setdefault(relative_path(pkg), pkg)
    directory.mkdir(parents=True, exist_ok=True)
    cache = cache or PackageCache()
    outcomes: dict[str, Outcome] = {}
    import requests  # here, not at import time: requests costs the CLI start-up time

    files = transfer or SilentTransfer()
    say(f"fetching {len(wanted)} files into {directory}")
    files.start(len(wanted))
    with requests.Session() as session:
        for rel, pkg in sorted(wanted.items()):
            outcome = fetch_verified(pkg, directory / rel, session, cache, files.transferred)
            outcomes[rel] = outcome
            files.fetched(rel, (directory / rel).stat().st_size, outcome)
    say(f"indexing {directory}")
    rattler_adapter.index_channel(directory)
    recorded = LockMetadata.from_custom_metadata(lock.custom_metadata, where=str(lock_path))
    return MirrorResult(directory, lock_path, chosen, outcomes, dict(recorded.channels))


def fetch_verified(
    pkg: LockedPackage,
    dest: Path,
    session: requests.Session,
    cache: PackageCache | None = None,
    transferred: Callable[[int], None] | None = None,
) -> Outcome:
    """Put the locked file at ``dest``, whole and with the lock's hash, or raise."""
    if dest.is_file():
        try:
            verify_file(pkg, dest)
            return "kept"
        except ToolError:
            dest.unlink()  # not the locked file: fetch it again
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    cached = cache.cached_archive(pkg) if cache is not None and pkg.manager == "conda" else None
    local = local_path(pkg.url)
    if cached is not None:
        shutil.copyfile(cached, part)
        outcome: Outcome = "cached"
    elif local is not None:
        if not local.is_file():
            raise ToolError(
                f"{pkg.describe()}: {local} does not exist",
                "the lock's file:// source is gone; mirror on a machine that still has it",
            )
        shutil.copyfile(local, part)
        outcome = "copied"
    else:
        outcome = _download(pkg.url, part, session, transferred)
    try:
        verify_file(pkg, part)
    except ToolError:
        if outcome != "resumed":
            part.unlink()
            raise
        # What was there before the resume was not the start of this file: start over once.
        part.unlink()
        _download(pkg.url, part, session, transferred)
        try:
            verify_file(pkg, part)
        except ToolError:
            part.unlink()
            raise
        outcome = "downloaded"
    part.replace(dest)
    if cache is not None and pkg.manager == "conda" and outcome in ("downloaded", "resumed"):
        _share(dest, cache)
    return outcome


def _share(archive: Path, cache: PackageCache) -> None:
    """A hard link of a verified archive in the package cache (create then skips the download);
    nothing when the cache is on another filesystem or not writable."""
    import contextlib
    import os

    with contextlib.suppress(OSError):
        cache.root.mkdir(parents=True, exist_ok=True)
        target = cache.root / archive.name
        if not target.exists():
            os.link(archive, target)


def _download(
    url: str,
    part: Path,
    session: requests.Session,
    transferred: Callable[[int], None] | None = None,
) -> Outcome:
    """Fetch ``url`` into ``part``, continuing after the bytes already there when the server
    honours ``Range`` (206); a 200 answer means it did not, so the file is rewritten."""
    import requests

    offset = part.stat().st_size if part.is_file() else 0
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        with session.get(url, headers=headers, stream=True, timeout=TIMEOUT_S) as response:
            if offset and response.status_code == 416:
                return "resumed"  # nothing after offset: the .part may already be whole
            response.raise_for_status()
            resumed = bool(offset) and response.status_code == 206
            with part.open("ab" if resumed else "wb") as handle:
                for chunk in response.iter_content(CHUNK):
                    handle.write(chunk)
                    if transferred is not None:
                        transferred(len(chunk))
    except requests.RequestException as exc:
        kept = part.stat().st_size if part.is_file() else 0
        again = (
            f"{kept} bytes are kept in {part}; run the same command again to resume"
            if kept
            else "check the network (or a proxy) and run the same command again"
        )
        raise ToolError(f"cannot download {url}: {exc}", again) from None
    return "resumed" if resumed else "downloaded"
