"""The pip half of ``create``: bring each locked wheel and sdist into the package cache
(``pipcache``, checked against the lock's sha256), build the vetted sdists (``sdistbuild``),
check every wheel's own metadata against the lock, then install them into the staging prefix
(``wheelinstall``). Everything that can refuse the lock happens in ``prepare``, before the
conda packages are linked; ``install`` only writes.

Where the files come from: the lock's URLs, or a local index given with ``--pip-index`` (or
found through a mirror's marker, ``mirror.MARKER``): a folder holding the files by name, or a
PEP 503 simple index (``<index>/<project>/index.html`` whose links name the files, as
``envfactory mirror`` writes it).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

from envfactory.cache.pipcache import PipCache
from envfactory.cache.wheeltree import Tree
from envfactory.catalog.platforms import Platform
from envfactory.errors import UserInputError
from envfactory.lockfile.models import LockedPackage
from envfactory.progress import Transfer

Say = Callable[[str], None]


class Prepared(NamedTuple):
    wheels: tuple[tuple[LockedPackage, Tree], ...]  # each locked package, its unpacked wheel
    downloaded: int  # bytes over the network
    cached: int  # files that were in the cache already
    built: tuple[str, ...]  # sdists built into wheels (from the cache when built before)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def locate(index: Path, pkg: LockedPackage) -> Path:
    """The file of ``pkg`` in a local index: by name in the folder, else through the PEP 503
    page of its project. The file's hash is checked later, against the lock."""
    from packaging.utils import canonicalize_name

    if "/" in pkg.filename or pkg.filename in ("", ".", ".."):
        raise UserInputError(
            f"{pkg.describe()}: {pkg.filename!r} is not a file name",
            "the lock is damaged or crafted; re-lock it",
        )
    direct = index / pkg.filename
    if direct.is_file():
        return direct
    page = index / canonicalize_name(pkg.name) / "index.html"
    if page.is_file():
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        for href in parser.hrefs:
            path = unquote(urlsplit(href).path)
            if path.rsplit("/", 1)[-1] == pkg.filename and "://" not in href:
                found = (page.parent / path).resolve()
                if found.is_file():
                    return found
    raise UserInputError(
        f"{pkg.describe()}: {pkg.filename} is not in {index}",
        "pass the index that 'envfactory mirror' wrote for this lock (DIR/pypi/simple), or a "
        "folder holding the locked files by name",
    )


def requested(requirements: Sequence[str]) -> dict[str, str | None]:
    """The canonical names the lock's pip requirements name (pip marks those ``REQUESTED``),
    each with the URL of a direct reference (``name @ url``: PEP 610's ``direct_url.json``)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    out: dict[str, str | None] = {}
    for line in requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        out[canonicalize_name(req.name)] = req.url
    return out


def prepare(
    packages: Sequence[LockedPackage],
    cache_root: Path,
    *,
    platform: Platform,
    allow_build: Collection[str] = (),
    say: Say | None = None,
    index: Path | None = None,
    transfer: Transfer | None = None,
) -> Prepared:
    """Every locked pip file in the cache and checked, sdists built; nothing installed.
    ``index``: the local index the packages were relocated to, which also holds the build
    backend when there are sdists (a mirror does). ``transfer`` is told each file and the
    bytes downloaded (then ``say`` only the phases)."""
    from envfactory.install import sdistbuild
    from envfactory.solve.pypi import is_sdist

    tell = say or (lambda _m: None)
    sdists = [p for p in packages if is_sdist(p)]
    for pkg in sdistbuild.vet(sdists, allow_build):
        tell(f"{pkg.name} {pkg.version}: building its sdist runs its setup code (--allow-build)")
    cache = PipCache(cache_root)
    session = None
    downloaded = cached = 0
    started = time.monotonic()
    files: dict[str, Path] = {}
    wanted = list(packages)
    if sdists:
        backend = sdistbuild.backend_package(platform)
        if index is not None and cache.lookup(backend) is None:
            backend = backend._replace(url=locate(index, backend).resolve().as_uri())
        wanted.append(backend)
    if transfer is not None:
        transfer.start(len(wanted))
    for pkg in wanted:
        if session is None and cache.lookup(pkg) is None and not pkg.url.startswith("file:"):
            from envfactory.netconfig import pip_session

            session = pip_session()
        fetched = cache.fetch(pkg, session, transfer.transferred if transfer else None)
        files[pkg.sha256 or ""] = fetched.path
        downloaded += fetched.downloaded
        cached += fetched.outcome == "cached"
        if transfer is not None:
            transfer.fetched(pkg.filename, fetched.path.stat().st_size, fetched.outcome)
        elif fetched.outcome == "downloaded":
            tell(f"downloaded {pkg.filename} ({_size(fetched.downloaded)})")
    if session is not None:
        session.close()
    if downloaded and transfer is None:
        seconds = max(time.monotonic() - started, 1e-3)
        tell(f"pip: {_size(downloaded)} downloaded at {_size(downloaded / seconds)}/s")
    wheels: list[tuple[LockedPackage, Tree]] = []
    built: list[str] = []
    for pkg in packages:
        path = files[pkg.sha256 or ""]
        key = pkg.sha256 or ""
        if is_sdist(pkg):
            key = f"built-{sdistbuild.build_key(pkg)}"
            stem = f"{_wheel_stem(pkg.name)}-"
            wheel = cache.lookup_built(sdistbuild.build_key(pkg), stem)
            if wheel is None:
                tell(f"building {pkg.name} {pkg.version} from {pkg.filename} (offline)")
                backend_wheel = files[sdistbuild.vetted().backend["sha256"]]
                out = cache.scratch()
                try:
                    fresh = sdistbuild.build_wheel(path, pkg, backend_wheel, out)
                    wheel = cache.put_built(fresh, sdistbuild.build_key(pkg))
                finally:
                    shutil.rmtree(out, ignore_errors=True)
            built.append(f"{pkg.name} {pkg.version}")
            path = wheel
        # checked against the lock and its RECORD when unpacked, once; reused after that
        wheels.append((pkg, cache.tree(key, pkg, path)))
    return Prepared(tuple(wheels), downloaded, cached, tuple(built))


def install(
    prepared: Prepared,
    staging: Path,
    final: Path,
    platform: Platform,
    python: str,
    requirements: Mapping[str, str | None],
) -> None:
    """Install the prepared wheels into ``staging`` (a prefix that will live at ``final``)."""
    from packaging.utils import canonicalize_name

    from envfactory.cache import wheeltree
    from envfactory.cache.wheelinstall import scheme

    where = scheme(staging, final, platform, python)
    written: set[str] = set()
    for pkg, tree in prepared.wheels:
        name = canonicalize_name(pkg.name)
        wheeltree.install(
            tree,
            pkg,
            where,
            requested=name in requirements,
            direct_url=requirements.get(name),
            written=written,
        )


def _wheel_stem(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "_", name).lower()


def _size(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"
