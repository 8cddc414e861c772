"""The pip side of the package cache: the locked wheels and sdists, and the wheels built from
vetted sdists, kept by content so every later ``create`` and ``mirror`` reuses them.

Layout, inside the conda package cache's root (``pkgcache``, one ``ENVFACTORY_PKGS_DIRS`` for
both halves)::

    <root>/.pypi/<sha256>/<file name>             a wheel or sdist whose sha256 is <sha256>
    <root>/.pypi/built/<key>/<wheel name>         a wheel built from a vetted sdist
    <root>/.pypi/<entry>/.checked                 size, mtime and inode of the file when checked
    <root>/.pypi/unpacked/<key>/                  a wheel unpacked after its checks (wheeltree),
                                                  key: its sha256, or built-<key> for a build
    <root>/.pypi/.tmp-<random>/                   work in progress

An entry is published by one ``rename`` of a complete directory (file and ``.checked``), only
after the file's sha256 equalled the lock's; it is never changed afterwards. A second process
that fetched the same file meanwhile finds the name taken and drops its own copy. On reuse the
file must still be a regular file owned by this user, not writable by others, with the size,
mtime and inode of ``.checked``; otherwise it is hashed again (and removed when it differs).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple

from envfactory import host
from envfactory.cache.fetch import local_path
from envfactory.errors import ToolError, UserInputError
from envfactory.lockfile.models import LockedPackage

PIP_DIR = ".pypi"
BUILT = "built"
UNPACKED = "unpacked"
CHECKED = ".checked"
CHUNK = 1 << 20
TIMEOUT_S = 60

Outcome = Literal["cached", "copied", "downloaded"]
OnBytes = Callable[[int], None]


class Fetched(NamedTuple):
    path: Path
    outcome: Outcome
    downloaded: int  # bytes that came over the network


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _signature(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def redact(url: str) -> str:
    """``url`` without a password (``https://user:****@host/...``), for messages."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username}:****@{host}"))


class PipCache:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.directory = root / PIP_DIR

    # -- entries ------------------------------------------------------------------------------

    def _usable(self, entry: Path, name: str, sha256: str | None) -> Path | None:
        path = entry / name
        try:
            st = path.lstat()
        except OSError:
            return None
        mine = host.owned_privately(st)
        if not stat.S_ISREG(st.st_mode) or not mine:
            return None
        try:
            recorded = json.loads((entry / CHECKED).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            recorded = None
        if recorded == _signature(st):
            return path
        if sha256 is not None and sha256_of(path) == sha256:
            # same content, touched since (a copy restored, an inode changed): record it anew
            with contextlib.suppress(OSError):
                (entry / CHECKED).write_text(json.dumps(_signature(path.stat())), "utf-8")
            return path
        return None

    def lookup(self, pkg: LockedPackage) -> Path | None:
        """The cached file of ``pkg`` (by the lock's sha256), or None."""
        assert pkg.sha256 is not None
        return self._usable(self.directory / pkg.sha256, pkg.filename, pkg.sha256)

    def lookup_built(self, key: str, name_prefix: str) -> Path | None:
        entry = self.directory / BUILT / key
        if not entry.is_dir():
            return None
        wheels = sorted(p.name for p in entry.glob("*.whl"))
        for name in wheels:
            if name.lower().startswith(name_prefix):
                return self._usable(entry, name, None)
        return None

    def tree(self, key: str, pkg: LockedPackage, wheel: Path) -> Any:
        """The unpacked form of ``pkg``'s wheel (``wheeltree.Tree``) under ``key``: reused when
        this user published it and nobody else can write it, else unpacked from ``wheel``
        (checked against the lock and its RECORD on the way) and published."""
        from envfactory.cache import wheeltree

        entry = self.directory / UNPACKED / key
        try:
            st = entry.lstat()
            manifest = (entry / wheeltree.MANIFEST).lstat()
        except OSError:
            pass
        else:
            mine = all(host.owned_privately(s) for s in (st, manifest))
            if mine and stat.S_ISDIR(st.st_mode) and stat.S_ISREG(manifest.st_mode):
                found = wheeltree.read(entry, pkg)
                if found is not None and wheeltree.unchanged(found):
                    return found
            # not ours, not this package, or a file edited through an environment's hard
            # link: unpacked again (environments linked to the old files keep them). Renamed
            # aside first, so no other create ever sees a half-removed entry.
            aside = entry.with_name(f".retired-{os.getpid()}-{entry.name}")
            with contextlib.suppress(OSError):  # retired by another create meanwhile
                entry.rename(aside)
            shutil.rmtree(aside, ignore_errors=True)
        staging = self._staging()
        try:
            wheeltree.unpack(wheel, pkg, staging)
            entry.parent.mkdir(parents=True, exist_ok=True)
            try:
                staging.rename(entry)
            except OSError:  # published meanwhile by another create
                shutil.rmtree(staging, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        found = wheeltree.read(entry, pkg)
        if found is None:
            raise ToolError(
                f"the cache entry {entry} is not usable", "run 'envfactory cache clean'"
            )
        return found

    def scratch(self) -> Path:
        """A new private directory inside the cache (same filesystem: entries move in)."""
        return self._staging()

    def _staging(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.directory))

    def _publish(self, staging: Path, entry: Path, name: str) -> Path:
        (staging / CHECKED).write_text(json.dumps(_signature((staging / name).stat())), "utf-8")
        entry.parent.mkdir(parents=True, exist_ok=True)
        try:
            staging.rename(entry)
        except OSError:
            # taken meanwhile by another process (or a stale entry that failed its check)
            shutil.rmtree(staging, ignore_errors=True)
            found = self._usable(entry, name, None)
            if found is None:
                shutil.rmtree(entry, ignore_errors=True)
                raise ToolError(
                    f"the cache entry {entry} is not usable and could not be replaced",
                    "run 'envfactory cache clean' and try again",
                ) from None
            return found
        return entry / name

    def put_built(self, wheel: Path, key: str) -> Path:
        """Keep a wheel built from a vetted sdist under ``key`` (moved in)."""
        staging = self._staging()
        try:
            shutil.move(str(wheel), staging / wheel.name)
            return self._publish(staging, self.directory / BUILT / key, wheel.name)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def fetch(
        self, pkg: LockedPackage, session: Any = None, on_bytes: OnBytes | None = None
    ) -> Fetched:
        """The locked file of ``pkg`` in the cache: found there, copied from a ``file://``
        URL (a mirror, a wheel folder) or downloaded; its sha256 checked against the lock's
        before it gets its place."""
        assert pkg.sha256 is not None
        found = self.lookup(pkg)
        if found is not None:
            return Fetched(found, "cached", 0)
        entry = self.directory / pkg.sha256
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)  # failed its check: fetched again
        staging = self._staging()
        try:
            target = staging / pkg.filename
            local = local_path(pkg.url)
            if local is not None:
                if not local.is_file():
                    raise ToolError(
                        f"{pkg.describe()}: {local} does not exist",
                        "pass the folder or mirror that holds the locked file (--pip-index)",
                    )
                shutil.copyfile(local, target)
                digest, outcome, downloaded = sha256_of(target), "copied", 0
            else:
                digest, downloaded = _download(pkg, target, session, on_bytes)
                outcome = "downloaded"
            if digest != pkg.sha256:
                raise ToolError(
                    f"{pkg.describe()}: the sha256 of {redact(pkg.url)} is {digest}, the lock "
                    f"says {pkg.sha256}",
                    "the file changed after locking; re-lock from an index you trust, or "
                    "restore the original file",
                )
            path = self._publish(staging, entry, pkg.filename)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return Fetched(path, outcome, downloaded)  # type: ignore[arg-type]

    # -- bookkeeping ---------------------------------------------------------------------------

    def info(self) -> tuple[int, int, int]:
        """(locked files, built wheels, bytes)."""
        files = built = total = 0
        if not self.directory.is_dir():
            return 0, 0, 0
        for child in self.directory.iterdir():
            if child.name == BUILT:
                built += sum(1 for _ in child.glob("*/*.whl"))
            elif child.name != UNPACKED and not child.name.startswith("."):
                files += sum(1 for p in child.iterdir() if p.name != CHECKED)
        for dirpath, _dirs, names in os.walk(self.directory):
            for name in names:
                with contextlib.suppress(OSError):
                    total += (Path(dirpath) / name).lstat().st_size
        return files, built, total

    def clean(self) -> tuple[int, int]:
        """Remove every entry (environments keep their installed copies). Returns (entries,
        bytes)."""
        files, built, total = self.info()
        shutil.rmtree(self.directory, ignore_errors=True)
        return files + built, total


def _download(
    pkg: LockedPackage, target: Path, session: Any, on_bytes: OnBytes | None
) -> tuple[str, int]:
    import requests

    from envfactory.netconfig import pip_session

    url = pkg.url
    if not url.startswith(("http://", "https://")):
        raise UserInputError(
            f"{pkg.describe()}: unsupported URL {redact(url)!r}",
            "a lock's pip URLs are http(s) or file://",
        )
    session = session or pip_session()
    digest = hashlib.sha256()
    count = 0
    try:
        with session.get(url, stream=True, timeout=TIMEOUT_S) as response:
            response.raise_for_status()
            with target.open("wb") as handle:
                for chunk in response.iter_content(CHUNK):
                    handle.write(chunk)
                    digest.update(chunk)
                    count += len(chunk)
                    if on_bytes is not None:
                        on_bytes(len(chunk))
    except requests.RequestException as exc:
        raise ToolError(
            f"cannot download {redact(url)}: {type(exc).__name__}",
            "offline or behind a proxy? pip's settings (index, proxy, cert, trusted-host in "
            "pip.conf or PIP_* variables) are used; on a machine without the index, create "
            "from a mirror: 'envfactory mirror LOCK DIR' online, then the create command it "
            "prints",
        ) from None
    return digest.hexdigest(), count
