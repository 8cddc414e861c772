"""Fetching a locked conda archive and filling its cache entry.

``populate`` (run by the pool's workers, ``pool.fill``): the archive from the cache, a read-only
source or a ``file://`` URL, else downloaded; its sha256 (or md5) compared with the lock's before
it is opened as an archive; its members bounded by its own ``paths.json`` (``unpack``);
extracted into a staging directory, checked (``pathcheck.check_extracted``), summarized and
published under its sha256 by one rename. A kill -9 at any point leaves either no entry or a
complete one.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path
from typing import Any

from envfactory import host
from envfactory.cache import unpack
from envfactory.cache.layout import (
    BY_MD5,
    ENTRIES,
    ENTRY_FORMAT,
    PACKAGE,
    RECORD,
    STAGING,
    CacheLocation,
    Outcome,
    Wanted,
    archive_name,
    current_umask,
    expected_hash,
)
from envfactory.cache.pathcheck import check_extracted
from envfactory.cache.staging import Staging
from envfactory.cache.summary import SUMMARY, summary_document
from envfactory.cache.unpack import CHUNK, disk_full, file_digest
from envfactory.errors import ToolError, UserInputError
from envfactory.fsio import write_cached

_LOCAL = threading.local()
# Bumped by every PackageCache opened: a thread's session is made again after it, so network
# settings (.condarc's proxy_servers and ssl_verify, the environment) are read per cache opened,
# not once per process.
_GENERATION = 0


def new_sessions() -> None:
    """Make every thread's next download open a new session, with the settings as they are now."""
    global _GENERATION
    _GENERATION += 1


# In a worker: the shared count of bytes downloaded, which the create's process reads for its
# progress bar (a multiprocessing Value, handed over as the worker starts).
_DOWNLOADED: Any = None


def count_downloads(downloaded: Any) -> None:
    """Where ``download`` adds the bytes it wrote (a counter the parent reads), or None."""
    global _DOWNLOADED
    _DOWNLOADED = downloaded


TIMEOUT_S = 60


def verify_file(pkg: Wanted, path: Path) -> None:
    """Raise unless ``path`` has the lock's sha256 (preferred) or md5 for ``pkg``."""
    if not archive_matches(pkg, path):
        algorithm = "sha256" if pkg.sha256 else "md5"
        raise ToolError(
            f"{pkg.describe()}: the {algorithm} of {path} differs from the lock's "
            f"{pkg.sha256 or pkg.md5}",
            "the package file changed after locking; re-lock from a channel you trust, "
            "or restore the original file",
        )


def archive_matches(pkg: Wanted, path: Path) -> bool:
    algorithm, expected = expected_hash(pkg)
    return file_digest(path, algorithm) == expected


def local_path(url: str) -> Path | None:
    return host.file_url_path(url)


class OfflineError(ToolError):
    """A package could not be downloaded."""


def cached_archive(location: CacheLocation, pkg: Wanted) -> Path | None:
    """A copy of ``pkg``'s archive with the lock's hash: in the cache, then in the read-only
    sources (conda's pkgs dirs). A cached archive with the wrong hash is removed."""
    name = archive_name(pkg)
    mine = location.root / name
    if mine.is_file() and not mine.is_symlink():
        if archive_matches(pkg, mine):
            return mine
        mine.unlink(missing_ok=True)
    for source in location.archive_sources:
        theirs = source / name
        if theirs.is_file() and archive_matches(pkg, theirs):
            return theirs
    return None


def _session() -> Any:
    """This thread's HTTP session (one per worker thread: a session is not thread-safe)."""
    kept = getattr(_LOCAL, "session", None)
    if kept is not None and kept[0] == _GENERATION:
        return kept[1]
    from envfactory.netconfig import conda_session

    session = conda_session()  # .condarc's proxy_servers and ssl_verify
    _LOCAL.session = (_GENERATION, session)
    return session


def download(pkg: Wanted, staging: Path) -> Path:
    """Download ``pkg`` into ``staging`` and return the file; the hash is not checked yet."""
    import requests

    url = pkg.url
    if not url.startswith(("http://", "https://")):
        raise UserInputError(
            f"{pkg.describe()}: unsupported URL {url!r}", "a lock's URLs are http(s) or file://"
        )
    target = staging / archive_name(pkg)
    try:
        with _session().get(url, stream=True, timeout=TIMEOUT_S) as response:
            response.raise_for_status()
            with target.open("wb") as handle:
                for chunk in response.iter_content(CHUNK):
                    handle.write(chunk)
                    if _DOWNLOADED is not None:
                        with _DOWNLOADED.get_lock():
                            _DOWNLOADED.value += len(chunk)
    except requests.RequestException as exc:
        raise OfflineError(
            f"cannot download {url}: {exc}",
            "offline or behind a mirror? point the lock's channels at a mirror with "
            "--channel-map NAME=URL or ENVFACTORY_CHANNEL_MAP=NAME=URL,...; "
            "'envfactory mirror LOCK DIR' writes one on a machine that is online",
        ) from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(f"downloading {url}", staging) from None
        raise
    return target


def populate(location: CacheLocation, pkg: Wanted) -> tuple[Outcome, int]:
    """Fetch the archive, check its hash, then its size against its paths.json, unpack it
    into a staging directory, check it (``check_extracted``) and publish it under its
    sha256 by one rename. A name that is taken meanwhile (another process filled the same
    archive) keeps the entry that is there. Returns the outcome and the listed bytes."""
    algorithm, expected = expected_hash(pkg)
    root = location.root
    staging = Staging.make(root / STAGING, "")
    try:
        outcome: Outcome = "extracted"
        archive = cached_archive(location, pkg)
        downloaded = False
        if archive is None:
            local = local_path(pkg.url)
            if local is not None:
                if not local.is_file():
                    raise ToolError(
                        f"{pkg.describe()}: {local} does not exist",
                        "check the channel map (--channel-map NAME=URL)",
                    )
                archive = local
            else:
                archive = download(pkg, staging.path)
                downloaded, outcome = True, "downloaded"
        sha, md5 = unpack.digests(archive)  # before anything is unpacked
        found = sha if algorithm == "sha256" else md5
        if found != expected:
            raise ToolError(
                f"{pkg.describe()}: {algorithm} of {pkg.url} is {found}, the lock says {expected}",
                "the package file changed after locking; re-lock from a channel you "
                "trust, or restore the original file",
            )
        target = root / ENTRIES / sha
        size = 0
        if not os.path.lexists(target):
            what = pkg.describe()
            unpack.check_bounds(what, archive)
            work = staging.path / "entry"
            work.mkdir()
            unpack.extract(what, archive, work / PACKAGE)
            unpack.normalize_modes(work / PACKAGE, current_umask())
            summary = check_extracted(pkg, work / PACKAGE)
            size = summary.size
            (work / RECORD).write_text(
                json.dumps({"format": ENTRY_FORMAT, "sha256": sha, "md5": md5}) + "\n",
                encoding="utf-8",
            )
            (work / SUMMARY).write_text(
                summary_document(work / PACKAGE, sha, summary), encoding="utf-8"
            )
            work.chmod(0o777 & ~current_umask())
            try:
                work.rename(target)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                outcome = "cached"  # published by another process meanwhile
        write_cached(root / BY_MD5 / md5, sha + "\n")
        if downloaded:
            archive.replace(root / archive_name(pkg))
        return outcome, size
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(f"filling the cache entry of {pkg.describe()}", root) from None
        raise
    finally:
        staging.remove()
