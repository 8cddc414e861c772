"""Sdists at ``create``: building one runs its own code (``setup.py``, a build backend), so only
vetted ones are built without being asked.

Vetted: the sdist-only releases the catalog's combos lock, pinned by name, version and the
sha256 PyPI publishes (``envfactory/data/vetted-sdists.yaml``). Any other sdist in a lock stops
``create`` before anything is fetched or installed, naming it, unless ``--allow-build NAME``
names it; then it is built the same way and named in the output. An sdist with sources for a
compiler is refused either way (``pypi.compiled_sources``), unless its vetted entry names the
sdist's own switch for a build without them (``pure_python_env``: wrapt 1.12.1's
``WRAPT_INSTALL_EXTENSIONS=false``); the wheel built so must then be pure Python.

A build runs ``uv build --wheel`` with envfactory's own interpreter (never one from the new
prefix), offline (``--offline --no-index``), its only build requirement the pinned setuptools
wheel from the package cache (checked by its sha256), in a private temporary directory (0700,
also its ``HOME``, ``TMPDIR`` and uv cache) with an environment stripped of pip/uv/Python
settings; where ``unshare -rn`` works (Linux user namespaces) it also runs without a network
device. The wheel it makes must carry the lock's name and version (``wheelinstall.check_metadata``)
and is kept in the package cache by the sdist's sha256, so a later create builds nothing.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import NamedTuple

from envfactory.catalog.platforms import Platform
from envfactory.compiled import DATA_DIR
from envfactory.errors import ToolError, UserInputError
from envfactory.lockfile.models import LockedPackage

DATA = DATA_DIR / "vetted-sdists.yaml"
BUILD_TIMEOUT_S = 600


class Vetted(NamedTuple):
    sdists: frozenset[tuple[str, str, str]]  # (canonical name, version, sha256)
    backend: dict[str, str]
    #: (canonical name, version, sha256) -> the sdist's own switch for a pure-Python build
    pure_python_env: dict[tuple[str, str, str], dict[str, str]]


@functools.cache
def vetted() -> Vetted:
    from packaging.utils import canonicalize_name

    from envfactory.yamlio import load_yaml

    doc = load_yaml(DATA.name, DATA.read_text(encoding="utf-8"))
    sdists = frozenset(
        (canonicalize_name(s["name"]), str(s["version"]), s["sha256"]) for s in doc["sdists"]
    )
    pure: dict[tuple[str, str, str], dict[str, str]] = {
        (canonicalize_name(s["name"]), str(s["version"]), s["sha256"]): {
            str(k): str(v) for k, v in s["pure_python_env"].items()
        }
        for s in doc["sdists"]
        if s.get("pure_python_env")
    }
    return Vetted(sdists, {k: str(v) for k, v in doc["backend"].items()}, pure)


def is_vetted(pkg: LockedPackage) -> bool:
    from packaging.utils import canonicalize_name

    return (canonicalize_name(pkg.name), pkg.version, pkg.sha256 or "") in vetted().sdists


def pure_python_env(pkg: LockedPackage) -> dict[str, str]:
    """The vetted sdist's own switch for a build without its C sources (empty: none)."""
    from packaging.utils import canonicalize_name

    key = (canonicalize_name(pkg.name), pkg.version, pkg.sha256 or "")
    return dict(vetted().pure_python_env.get(key, {}))


def backend_package(platform: Platform) -> LockedPackage:
    """The pinned build backend as a locked file (fetched through the package cache)."""
    b = vetted().backend
    return LockedPackage("pip", b["name"], b["version"], platform, b["url"], sha256=b["sha256"])


def vet(sdists: Sequence[LockedPackage], allow_build: Collection[str]) -> list[LockedPackage]:
    """The sdists that are built only because ``--allow-build`` names them; raise for one that
    is neither vetted nor allowed."""
    from packaging.utils import canonicalize_name

    allowed = {canonicalize_name(n) for n in allow_build}
    unvetted = [p for p in sdists if not is_vetted(p)]
    refused = [p for p in unvetted if canonicalize_name(p.name) not in allowed]
    if refused:
        listed = "; ".join(f"{p.name} {p.version} ({p.filename})" for p in refused)
        flags = " ".join(f"--allow-build {p.name}" for p in refused)
        raise UserInputError(
            f"the lock holds sdists that envfactory has not vetted: {listed}. Building one runs "
            "its own setup code on this machine",
            f"read the sdist, then pass {flags} to build it; or build its wheel yourself and "
            "create from a folder holding it (--pip-index)",
        )
    return unvetted


def build_key(pkg: LockedPackage) -> str:
    """The cache key of the wheel built from ``pkg``: the sdist's and the backend's sha256."""
    return f"{pkg.sha256}-{vetted().backend['sha256'][:16]}"


@functools.cache
def _no_network_prefix() -> tuple[str, ...]:
    """``unshare -rn`` where it works here (a new user and network namespace: loopback only)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    try:
        probe = subprocess.run(
            [unshare, "-rn", "true"], capture_output=True, timeout=30, check=False
        )
    except OSError:
        return ()
    return (unshare, "-rn", "--") if probe.returncode == 0 else ()


def _environment(home: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), TMPDIR=str(home), UV_CACHE_DIR=str(home / "uv-cache"))
    return env


def build_wheel(archive: Path, pkg: LockedPackage, backend: Path, out: Path) -> Path:
    """Build ``archive`` (checked against the lock already) into a wheel in ``out``."""
    from envfactory.cache.wheelinstall import check_metadata
    from envfactory.solve.pypi import compiled_sources, uv_binary

    switch = pure_python_env(pkg)  # a vetted sdist whose C sources are optional
    compiled = [] if switch else compiled_sources(archive)
    if compiled:
        shown = ", ".join(c.split("/", 1)[-1] for c in compiled[:3])
        more = f" and {len(compiled) - 3} more" if len(compiled) > 3 else ""
        raise ToolError(
            f"the lock holds an sdist that needs a compiler, which create does not run: "
            f"{pkg.name} {pkg.version} ({pkg.filename}: {shown}{more})",
            "build a wheel of it for the target yourself and create from a folder holding it "
            "(--pip-index), or lock with a python for which the index has a wheel",
        )
    private = Path(tempfile.mkdtemp(prefix="envfactory-build-"))  # 0700
    try:
        find_links = private / "backend"
        find_links.mkdir()
        shutil.copyfile(backend, find_links / backend.name)
        source = private / archive.name
        shutil.copyfile(archive, source)
        command = [*_no_network_prefix(), uv_binary(), "build", "--wheel", "--offline"]
        command += ["--no-config", "--no-python-downloads", "--no-index"]
        command += ["--find-links", str(find_links), "--python", sys.executable]
        command += ["--out-dir", str(private / "out"), str(source)]
        try:
            proc = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
                env={**_environment(private), **switch},
                cwd=private,
            )
        except subprocess.TimeoutExpired:
            raise ToolError(
                f"building {pkg.describe()} ran longer than {BUILD_TIMEOUT_S} s"
            ) from None
        built = sorted((private / "out").glob("*.whl")) if proc.returncode == 0 else []
        if len(built) != 1:
            tail = "\n".join(f"  {line}" for line in proc.stderr.strip().splitlines()[-12:])
            raise ToolError(
                f"building {pkg.name} {pkg.version} from {pkg.filename} failed:\n{tail}",
                "a build has no network and only setuptools "
                f"{vetted().backend['version']}; build its wheel yourself and create from a "
                "folder holding it (--pip-index)",
            )
        check_metadata(built[0], pkg)
        if switch:
            _check_pure_python(built[0], pkg)
        out.mkdir(parents=True, exist_ok=True)
        target = out / built[0].name
        shutil.move(str(built[0]), target)
        return target
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _check_pure_python(wheel: Path, pkg: LockedPackage) -> None:
    """A wheel built with an sdist's pure-Python switch holds no compiled code: tags
    ``*-none-any`` and no extension module or library among its members."""
    import zipfile

    from packaging.utils import parse_wheel_filename

    tags = parse_wheel_filename(wheel.name)[3]
    with zipfile.ZipFile(wheel) as zf:
        binaries = [n for n in zf.namelist() if n.endswith((".so", ".pyd", ".dll", ".dylib"))]
    if binaries or any(t.abi != "none" or t.platform != "any" for t in tags):
        raise ToolError(
            f"building {pkg.name} {pkg.version} without its C sources gave {wheel.name}"
            + (f" with {', '.join(binaries[:3])}" if binaries else ""),
            "its pure-Python switch (envfactory/data/vetted-sdists.yaml) no longer works; "
            "build its wheel yourself and create from a folder holding it (--pip-index)",
        )
