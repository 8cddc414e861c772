"""Mirror: the packages of a lock, downloaded, hash-checked and written as a local channel, so an
air-gapped machine can ``envfactory create ENV --channel-map NAME=file://DIR``.

Layout of DIR: ``<subdir>/<file>`` for conda packages with a ``repodata.json`` per subdir
(``rattler.index.index_fs``, through ``rattler_adapter``); ``pypi/files/<file>`` for the pip
side (wheels and sdists, and the pinned build backend when there are sdists: ``sdistbuild``)
under a PEP 503 simple index ``pypi/simple/<project>/index.html`` whose links carry each file's
``#sha256=``; and ``envfactory-mirror.json``, the marker through which ``create
--channel-map NAME=file://DIR`` finds that index by itself (``--pip-index DIR/pypi/simple``
says the same explicitly).

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

from envfactory.cache.pkgcache import PackageCache, local_path, verify_file
from envfactory.catalog.model import Platform
from envfactory.errors import ToolError, UserInputError
from envfactory.lockfile.models import LockedPackage
from envfactory.progress import Progress, SilentTransfer, Transfer
from envfactory.solve.channels import ChannelMap
from envfactory.solve.pypi import is_sdist

if TYPE_CHECKING:
    import requests

Outcome = Literal["kept", "downloaded", "resumed", "copied", "cached"]
PIP_FILES = "pypi/files"
PIP_SIMPLE = "pypi/simple"
MARKER = "envfactory-mirror.json"
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
        return any(path.startswith(f"{PIP_FILES}/") for path in self.outcomes)

    def create_command(self, target: str) -> str:
        """The command that builds the environment from this mirror alone."""
        url = self.directory.resolve().as_uri()
        parts = [f"envfactory create {target}"]
        parts += [f"--channel-map {name}={url}" for name in self.channels]
        if self.has_wheels:
            parts.append(f"--pip-index {self.directory.resolve() / PIP_SIMPLE}")
        return " ".join(parts)


_PIP_FILE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+!\-]*\.(?:whl|tar\.gz|zip|tar\.bz2|tgz)\Z")


def known_subdirs() -> frozenset[str]:
    from rattler import Subdir

    return frozenset(str(p) for p in Subdir.all())


def relative_path(pkg: LockedPackage) -> str:
    """Where ``pkg`` goes in the mirror; refused unless it is ``<known subdir>/<archive>`` or
    ``wheels/<wheel>`` (the lock's URL must not choose a path outside DIR)."""
    if pkg.manager == "pip":
        if not _PIP_FILE.match(pkg.filename) or ".." in pkg.filename:
            raise UserInputError(
                f"{pkg.describe()}: {pkg.filename!r} is not a wheel or sdist file name",
                "the lock is damaged or crafted; re-lock it",
            )
        return f"{PIP_FILES}/{pkg.filename}"
    from envfactory.cache.pkgcache import archive_name

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
    from envfactory.lockfile.read import read_lock
    from envfactory.solve import rattler_adapter

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
    if any(is_sdist(p) for p in wanted.values()):
        from envfactory.install.sdistbuild import backend_package

        backend = backend_package(chosen[0])  # what create builds the sdists with, offline
        wanted.setdefault(relative_path(backend), backend)
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
    pip_files = [pkg for rel, pkg in wanted.items() if rel.startswith(f"{PIP_FILES}/")]
    if pip_files:
        write_simple_index(directory, pip_files)
    say(f"indexing {directory}")
    rattler_adapter.index_channel(directory)
    return MirrorResult(directory, lock_path, chosen, outcomes, dict(lock.metadata.channels))


def write_simple_index(directory: Path, files: Sequence[LockedPackage]) -> None:
    """A PEP 503 simple index of the mirror's pip files (``pypi/simple``), and the marker that
    names it. Names and file names were checked (``relative_path``); they are escaped all the
    same."""
    import html
    import json
    from urllib.parse import quote

    from packaging.utils import canonicalize_name

    from envfactory.fsio import atomic_write

    projects: dict[str, list[LockedPackage]] = {}
    for pkg in files:
        projects.setdefault(canonicalize_name(pkg.name), []).append(pkg)
    simple = directory / PIP_SIMPLE
    pages = []
    for name, pkgs in sorted(projects.items()):
        links = "".join(
            f'<a href="../../files/{quote(p.filename)}#sha256={p.sha256}">'
            f"{html.escape(p.filename)}</a><br>\n"
            for p in sorted(pkgs, key=lambda p: p.filename)
        )
        title = f"<h1>{html.escape(name)}</h1>\n"
        page = f"<!DOCTYPE html>\n<html><body>\n{title}{links}</body></html>\n"
        (simple / name).mkdir(parents=True, exist_ok=True)
        atomic_write(simple / name / "index.html", page)
        pages.append(f'<a href="{quote(name)}/">{html.escape(name)}</a><br>\n')
    root = f"<!DOCTYPE html>\n<html><body>\n{''.join(pages)}</body></html>\n"
    atomic_write(simple / "index.html", root)
    marker = {"pip_index": PIP_SIMPLE, "written_by": "envfactory mirror"}
    atomic_write(directory / MARKER, json.dumps(marker, indent=1, sort_keys=True) + "\n")


def pip_index_of(channel_map: ChannelMap) -> Path | None:
    """The pip index of a mirror a channel is mapped to (its ``MARKER``), if any."""
    import json

    for url in channel_map.overrides.values():
        if "://" in url and not url.startswith("file://"):
            continue
        folder = local_path(url) or Path(url)
        marker = folder / MARKER
        if not marker.is_file():
            continue
        try:
            doc = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        # the one layout this envfactory writes; nothing else the marker says is followed
        if isinstance(doc, dict) and doc.get("pip_index") == PIP_SIMPLE:
            return folder / PIP_SIMPLE
    return None


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
    if pkg.manager == "pip" and cache is not None and local_path(pkg.url) is None:
        return _through_pip_cache(pkg, dest, cache, transferred)
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


def _through_pip_cache(
    pkg: LockedPackage,
    dest: Path,
    cache: PackageCache,
    transferred: Callable[[int], None] | None = None,
) -> Outcome:
    """A pip file from the package cache, fetched into it first when missing (checked against
    the lock's sha256 there), then copied to ``dest`` under a ``.part`` name."""
    from envfactory.cache.pipcache import PipCache

    fetched = PipCache(cache.root).fetch(pkg, on_bytes=transferred)
    part = dest.with_name(dest.name + ".part")
    shutil.copyfile(fetched.path, part)
    part.replace(dest)
    return "cached" if fetched.outcome == "cached" else "downloaded"


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
