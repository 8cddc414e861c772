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
fetches what is missing.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import unquote, urlparse

from envfactory.build.checks import LockedPackage
from envfactory.build.create import verify_file
from envfactory.build.lockmeta import LockMetadata
from envfactory.catalog.model import Platform
from envfactory.errors import ToolError, UserInputError
from envfactory.progress import Progress

if TYPE_CHECKING:
    import requests

Outcome = Literal["kept", "downloaded", "resumed", "copied"]
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


def relative_path(pkg: LockedPackage) -> str:
    if pkg.manager == "pip":
        return f"{WHEELS_DIR}/{pkg.filename}"
    subdir = pkg.subdir or pkg.url.rsplit("/", 2)[-2]
    return f"{subdir}/{pkg.filename}"


def mirror_lock(
    lock_path: Path,
    directory: Path,
    platforms: Sequence[Platform] = (),
    progress: Progress | None = None,
) -> MirrorResult:
    """Download exactly the packages of ``lock_path`` (all its platforms unless ``platforms``),
    check each against the lock's hash, and index ``directory`` as a channel."""
    from envfactory.build import condalock_adapter, rattler_adapter

    say = progress or (lambda _m: None)
    lock = condalock_adapter.read_lock(lock_path)
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
    outcomes: dict[str, Outcome] = {}
    import requests  # here, not at import time: requests costs the CLI start-up time

    with requests.Session() as session:
        for index, (rel, pkg) in enumerate(sorted(wanted.items()), 1):
            outcome = fetch_verified(pkg, directory / rel, session)
            outcomes[rel] = outcome
            say(f"[{index}/{len(wanted)}] {rel}: {outcome}")
    say(f"indexing {directory}")
    rattler_adapter.index_channel(directory)
    recorded = LockMetadata.from_custom_metadata(lock.custom_metadata, where=str(lock_path))
    return MirrorResult(directory, lock_path, chosen, outcomes, dict(recorded.channels))


def fetch_verified(pkg: LockedPackage, dest: Path, session: requests.Session) -> Outcome:
    """Put the locked file at ``dest``, whole and with the lock's hash, or raise."""
    if dest.is_file():
        try:
            verify_file(pkg, dest)
            return "kept"
        except ToolError:
            dest.unlink()  # not the locked file: fetch it again
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    local = _local_path(pkg.url)
    if local is not None:
        if not local.is_file():
            raise ToolError(
                f"{pkg.describe()}: {local} does not exist",
                "the lock's file:// source is gone; mirror on a machine that still has it",
            )
        shutil.copyfile(local, part)
        outcome: Outcome = "copied"
    else:
        outcome = _download(pkg.url, part, session)
    try:
        verify_file(pkg, part)
    except ToolError:
        if outcome != "resumed":
            part.unlink()
            raise
        # What was there before the resume was not the start of this file: start over once.
        part.unlink()
        _download(pkg.url, part, session)
        try:
            verify_file(pkg, part)
        except ToolError:
            part.unlink()
            raise
        outcome = "downloaded"
    part.replace(dest)
    return outcome


def _download(url: str, part: Path, session: requests.Session) -> Outcome:
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
    except requests.RequestException as exc:
        kept = part.stat().st_size if part.is_file() else 0
        raise ToolError(
            f"cannot download {url}: {exc}",
            f"{kept} bytes are kept in {part}; run the same command again to resume",
        ) from None
    return "resumed" if resumed else "downloaded"


def _local_path(url: str) -> Path | None:
    return Path(unquote(urlparse(url).path)) if url.startswith("file://") else None
