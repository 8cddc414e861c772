"""The pip side of a lock: resolve a route's pip requirements to exact files (URL + sha256) for
the *target* platform and Python, not the host's, constrained by the conda packages already
chosen and the combo's companion constraints; and install locked files into a prefix.

The resolver is uv (``uv pip compile --python-version --python-platform --format pylock.toml``),
run as a subprocess with ``--no-config`` and without the host's ``UV_*`` settings, so the host's
configuration (extra indexes, global constraints) never leaks into a lock. uv evaluates
environment markers for the target Python and platform (pip's ``--python-version`` does not: a
Python 3.7 lock made with pip lacks importlib-metadata, zipp and typing-extensions), reads wheel
metadata with HTTP range requests instead of downloading 300 MB TensorFlow wheels, and resolves
sdist-only requirements (termcolor 1.1.0, clang 5.0) from their metadata. docs/closures.md has
the measurements. Of the files uv lists for each pinned version, the one a target installer
would pick is chosen here with ``packaging.tags`` (manylinux floors checked against the target's
glibc exactly, which uv's fixed platform list cannot express for e.g. glibc 2.27); a version
without a fitting wheel is locked as its sdist. ``index`` is PyPI when ``None``, a local folder
of wheels (``--no-index --find-links``), or an index URL.

Installing locked files is ``pipside`` (create's pip half), not this module.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envfactory import host
from envfactory.catalog.model import Constraint, Platform, os_of
from envfactory.errors import ToolError
from envfactory.lockfile.models import LockedPackage

UV_TIMEOUT_S = 900
PYPI_SIMPLE = "https://pypi.org/simple"
# conda packages that are not Python distributions, or that pip must never be asked about.
_NOT_PYTHON = {"python", "pip", "setuptools", "wheel"}
# uv's --python-platform knows these manylinux floors (x86_64); a target's glibc maps to the
# smallest one at or above it, and the exact floor is enforced when a wheel is picked.
_UV_MANYLINUX = (17, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40)


def platform_tags(platform: Platform, glibc: str | None) -> list[str]:
    """Wheel platform tags a target may install, best first (``--platform`` values for pip)."""
    if os_of(platform) == "windows":
        return ["win_amd64"]
    major, minor = (int(x) for x in (glibc or "2.17").split(".")[:2])
    tags = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014_x86_64", 12: "manylinux2010_x86_64", 5: "manylinux1_x86_64"}
    tags += [tag for floor, tag in legacy.items() if minor >= floor]
    return tags


def uv_platform(platform: Platform, glibc: str | None) -> str:
    """uv's ``--python-platform`` for a target: the smallest manylinux floor uv knows that is at
    or above the target's glibc (the exact floor is checked when a wheel is picked)."""
    if os_of(platform) == "windows":
        return "x86_64-pc-windows-msvc"
    minor = int((glibc or "2.17").split(".")[1])
    floor = next((m for m in _UV_MANYLINUX if m >= minor), _UV_MANYLINUX[-1])
    return f"x86_64-manylinux_2_{floor}"


def target_tags(platform: Platform, python: str, glibc: str | None) -> list[Tag]:
    """Every wheel tag the target interpreter accepts, most specific first (pip's order)."""
    version = tuple(int(x) for x in python.split(".")[:2])
    platforms = platform_tags(platform, glibc)
    tags = list(cpython_tags(version, platforms=platforms))
    tags += list(compatible_tags(version, f"cp{version[0]}{version[1]}", platforms))
    return list(dict.fromkeys(tags))


def _index_args(index: str | None) -> list[str]:
    if index is None:
        from envfactory.netconfig import pip_indexes

        # the user's pip index, when pip's configuration names one, reaches uv through its
        # environment (uv_index_environment), never the command line
        return [] if pip_indexes()[0] else ["--index-url", PYPI_SIMPLE]
    if "://" not in index or index.startswith("file://"):
        folder = host.file_url_path(index) or Path(index)
        return ["--no-index", "--find-links", str(folder.resolve())]
    return ["--index-url", index]


def conda_constraints(conda_packages: Sequence[LockedPackage]) -> list[str]:
    """``name==version`` for the Python packages the conda side already provides."""
    out = []
    for pkg in conda_packages:
        if pkg.manager != "conda" or pkg.name in _NOT_PYTHON or pkg.name.startswith("_"):
            continue
        try:
            Version(pkg.version)
        except InvalidVersion:
            continue  # conda versions like 1.1.1q are not PEP 440; pip cannot be told about them
        out.append(f"{pkg.name}=={pkg.version}")
    return sorted(out)


@functools.cache
def uv_binary() -> str:
    """uv's executable. Cached, and first called before any thread starts: uv's finder reads
    sysconfig, whose lazy set-up is not thread-safe on Python 3.11 (a second thread saw
    get_config_var("EXE") as None and find_uv_bin failed with a TypeError)."""
    from uv import find_uv_bin

    return find_uv_bin()


def _uv_environment(index: str | None = None) -> dict[str, str]:
    """The host's environment minus uv's own settings (a lock never depends on them); the cache
    directory is kept, it changes speed, not results. Without ``--pip-index``, the user's pip
    index settings (``netconfig.uv_index_environment``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k == "UV_CACHE_DIR"}
    if index is None:
        from envfactory.netconfig import uv_index_environment

        env.update(uv_index_environment())
    return env


@dataclass(frozen=True)
class PipTarget:
    """One pip resolution: what to resolve, for which interpreter and platform, from where."""

    requirements: tuple[str, ...]
    platform: Platform
    python: str
    glibc: str | None
    conda_packages: tuple[LockedPackage, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    index: str | None = None
    exclude_newer: str | None = None
    #: (name, version) of the previous lock's pip packages, which uv keeps where it can
    preferences: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        return f"{' '.join(self.requirements)} for {self.platform}, python {self.python}"

    def constraint_lines(self) -> list[str]:
        lines = conda_constraints(self.conda_packages)
        lines += [c.requirement for c in self.constraints]
        return lines

    def uv_command(self, requirements: Path, constraints: Path) -> list[str]:
        command = [uv_binary(), "pip", "compile", str(requirements), "-c", str(constraints)]
        command += ["--format", "pylock.toml", "--no-config", "--no-header", "--quiet"]
        # sdists are built (for their metadata) by the Python running envfactory, never one uv
        # would download or have to find (a Windows host has none on PATH or in the registry
        # when envfactory runs from an embeddable Python: "No interpreter found")
        command += ["--no-python-downloads", "--python", sys.executable]
        command += ["--python-version", self.python]
        command += ["--python-platform", uv_platform(self.platform, self.glibc)]
        command += _index_args(self.index)
        if self.exclude_newer:
            command += ["--exclude-newer", self.exclude_newer]
        return command


def lock_requirements(
    requirements: Sequence[str],
    *,
    platform: Platform,
    python: str,
    glibc: str | None,
    conda_packages: Sequence[LockedPackage],
    index: str | None = None,
    constraints: Sequence[Constraint] = (),
    exclude_newer: str | None = None,
) -> list[LockedPackage]:
    """Exact files for ``requirements`` and their dependencies on the target, minus whatever
    the conda side already provides (numpy from conda is not pip-installed again)."""
    target = PipTarget(
        tuple(requirements),
        platform,
        python,
        glibc,
        tuple(conda_packages),
        tuple(constraints),
        index,
        exclude_newer,
    )
    return lock_target(target)


def lock_target(target: PipTarget) -> list[LockedPackage]:
    """Resolve ``target`` with uv, preferring wheels: uv takes the newest version that has a
    wheel *or an sdist*, so a compiled package whose newest version has no wheel for the target
    (h5py for manylinux2014 on Python 3.11) would be locked as an sdist that create cannot
    build. Every package locked as an sdist is therefore asked for again as ``--only-binary``:
    all together first, then one by one where that fails; what has no wheel-only solution (an
    sdist-only release such as gast 0.2.2 or termcolor 1.1.0) stays an sdist."""
    first = _resolve(target, ())
    sdists = tuple(sorted(p.name for p in first if is_sdist(p)))
    if not sdists:
        return first
    together = _try_resolve(target, sdists)
    if together is not None:
        return together
    wheel_only: list[str] = []
    for name in sdists:
        if _try_resolve(target, (*wheel_only, name)) is not None:
            wheel_only.append(name)
    return _resolve(target, tuple(wheel_only)) if wheel_only else first


def _try_resolve(target: PipTarget, only_binary: tuple[str, ...]) -> list[LockedPackage] | None:
    try:
        return _resolve(target, only_binary)
    except ToolError:
        return None


def run_uv(
    target: PipTarget,
    what: str,
    *,
    args: Sequence[str] = (),
    pins: Sequence[str] = (),
    preferences: bool = True,
    command_for: Callable[[list[str]], list[str]] | None = None,
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run uv's ``pip compile`` of ``target`` in a private temporary folder: its requirements,
    its constraints plus ``pins``, ``args`` added to the command (``command_for`` may rewrite it
    whole), the previous lock's versions as preferences where ``preferences``. Returns uv's
    process and its resolution (the output file where one was used, else stdout). ``what``
    completes "uv ran longer than ... s while ..."."""
    with tempfile.TemporaryDirectory(prefix="envfactory-uv-") as tmp:
        requirements = Path(tmp) / "requirements.in"
        requirements.write_text("\n".join(target.requirements) + "\n", encoding="utf-8")
        constraints = Path(tmp) / "constraints.txt"
        lines = [*target.constraint_lines(), *pins]
        constraints.write_text("\n".join(lines) + "\n", encoding="utf-8")
        command = [*target.uv_command(requirements, constraints), *args]
        output = _preferences_file(Path(tmp), target.preferences) if preferences else None
        if output is not None:
            command += ["--output-file", str(output)]
        if command_for is not None:
            command = command_for(command)
        try:
            proc = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=UV_TIMEOUT_S,
                check=False,
                env=_uv_environment(target.index),
                cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            raise ToolError(f"uv ran longer than {UV_TIMEOUT_S} s while {what}") from None
        text = proc.stdout
        if output is not None and proc.returncode == 0:
            text = output.read_text(encoding="utf-8")
    return proc, text


def _resolve(target: PipTarget, only_binary: tuple[str, ...]) -> list[LockedPackage]:
    args = [arg for name in only_binary for arg in ("--only-binary", name)]
    proc, text = run_uv(target, f"resolving {target.describe()}", args=args)
    if proc.returncode != 0:
        tail = "\n".join(f"  {line}" for line in proc.stderr.strip().splitlines()[-16:])
        raise ToolError(
            f"no pip solution for {target.describe()}:\n{tail}",
            "the lines above are uv's account; check the pip index (--pip-index) offers files "
            "for the target python and platform, that the requirements agree with the conda "
            "packages, and see 'envfactory show COMBO' for the companion constraints",
        )
    packages = packages_from_pylock(text, target)
    forced = {canonicalize_name(n) for n in only_binary}
    if any(is_sdist(p) and p.name in forced for p in packages):
        raise ToolError(f"uv locked an sdist of one of {', '.join(sorted(forced))}")
    return packages


def _preferences_file(folder: Path, preferences: Sequence[tuple[str, str]]) -> Path | None:
    """The previous pins as an existing output file: uv's ``pip compile`` keeps the versions of
    the file it writes to where the requirements allow (its ``--upgrade-package`` mechanism);
    uv wants the name ``pylock.toml``, and needs only names and versions from it."""
    if not preferences:
        return None
    lines = ['lock-version = "1.0"', 'created-by = "envfactory"']
    for name, version in sorted(preferences):
        lines += [
            "",
            "[[packages]]",
            f"name = {json.dumps(name)}",
            f"version = {json.dumps(version)}",
        ]
    path = folder / "pylock.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def packages_from_pylock(text: str, target: PipTarget) -> list[LockedPackage]:
    """The locked packages of uv's ``pylock.toml`` output: per package, the file the target
    installs (best wheel by tag order, else the sdist), minus what the conda side provides."""
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError:  # pragma: no cover - python 3.10
        import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

    doc = tomllib.loads(text)
    conda_names = {canonicalize_name(p.name) for p in target.conda_packages if p.manager == "conda"}
    rank = {
        tag: i for i, tag in enumerate(target_tags(target.platform, target.python, target.glibc))
    }
    out = []
    for entry in doc.get("packages", []):
        name = canonicalize_name(entry["name"])
        if name in conda_names:
            continue
        url, sha256 = _pick_file(entry, rank, target)
        out.append(
            LockedPackage(
                manager="pip",
                name=name,
                version=str(entry["version"]),
                platform=target.platform,
                url=url,
                sha256=sha256,
            )
        )
    return sorted(out, key=lambda p: p.name)


def _pick_file(
    entry: Mapping[str, Any], rank: Mapping[Tag, int], target: PipTarget
) -> tuple[str, str]:
    best: tuple[int, str, str] | None = None
    for wheel in entry.get("wheels", []):
        url = _file_url(wheel)
        _, _, _, tags = parse_wheel_filename(url.rsplit("/", 1)[-1])
        fits = [rank[t] for t in tags if t in rank]
        if fits and (best is None or min(fits) < best[0]):
            best = (min(fits), url, _sha256(wheel, url))
    if best is not None:
        return best[1], best[2]
    sdist = entry.get("sdist")
    if isinstance(sdist, dict):
        url = _file_url(sdist)
        return url, _sha256(sdist, url)
    raise ToolError(
        f"{entry['name']} {entry['version']} has no file for {target.platform}, "
        f"python {target.python}"
        + (f", glibc {target.glibc}" if os_of(target.platform) == "linux" else ""),
        "its wheels need a newer glibc than the combo assumes, or another Python; see the "
        "route's glibc in 'envfactory show COMBO'",
    )


def _file_url(item: Mapping[str, Any]) -> str:
    if "url" in item:
        return _without_login(str(item["url"]))
    path = Path(str(item["path"]))
    return path.resolve().as_uri()


def _without_login(url: str) -> str:
    """A locked file's URL never carries a login (a private index's user and password): create
    adds the user's own login for that host again (``netconfig.pip_session``)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=host))


def _sha256(item: Mapping[str, Any], url: str) -> str:
    hashes = item.get("hashes") or {}
    sha = hashes.get("sha256") if isinstance(hashes, dict) else None
    sha = sha or _sha256_of_local(url)
    if not sha:
        raise ToolError(f"the index gave no sha256 for {url}")
    return str(sha)


def _sha256_of_local(url: str) -> str | None:
    if not url.startswith("file://"):
        return None
    return hashlib.sha256((host.file_url_path(url) or Path(url)).read_bytes()).hexdigest()


SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".zip")
# Source files that need a compiler: an sdist holding any of them is not built at create time.
COMPILED_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".pyx", ".f", ".f90", ".cu", ".rs", ".go")


def is_sdist(pkg: LockedPackage) -> bool:
    return pkg.manager == "pip" and pkg.filename.endswith(SDIST_SUFFIXES)


def compiled_sources(archive: Path) -> list[str]:
    """The member names of an sdist that need a compiler (tests and docs folders ignored)."""
    import tarfile
    import zipfile

    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
    else:
        with tarfile.open(archive) as tf:
            names = tf.getnames()
    skip = ("/tests/", "/test/", "/docs/", "/doc/", "/examples/", "/benchmarks/")
    return sorted(
        n for n in names if n.lower().endswith(COMPILED_SUFFIXES) and not any(s in n for s in skip)
    )
