"""The pip side of a lock: resolve a route's pip requirements to exact wheels (URL + sha256) for
the *target* platform and Python, not the host's, constrained by the conda packages already
chosen; and install locked wheels into a prefix.

The resolver is pip itself (``pip install --dry-run --report`` with ``--platform``,
``--python-version`` and ``--only-binary=:all:``), run as a subprocess of the interpreter that
runs envfactory, with ``--isolated`` so the host's pip configuration (extra indexes, global
constraints, find-links) never leaks into a lock; nothing is installed on the host. ``index`` is
PyPI when ``None``, a local folder of wheels (``--no-index --find-links``), or an index URL.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envfactory.build.checks import LockedPackage
from envfactory.catalog.model import Platform, os_of
from envfactory.errors import ToolError

PIP_TIMEOUT_S = 900
# conda packages that are not Python distributions, or that pip must never be asked about.
_NOT_PYTHON = {"python", "pip", "setuptools", "wheel"}


def platform_tags(platform: Platform, glibc: str | None) -> list[str]:
    """pip ``--platform`` values a wheel for ``platform`` may carry."""
    if os_of(platform) == "windows":
        return ["win_amd64"]
    major, minor = (int(x) for x in (glibc or "2.17").split(".")[:2])
    tags = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014_x86_64", 12: "manylinux2010_x86_64", 5: "manylinux1_x86_64"}
    tags += [tag for floor, tag in legacy.items() if minor >= floor]
    return tags


def site_packages(prefix: Path, platform: Platform, python: str) -> Path:
    if os_of(platform) == "windows":
        return prefix / "Lib" / "site-packages"
    return prefix / "lib" / f"python{python}" / "site-packages"


def _index_args(index: str | None) -> list[str]:
    if index is None:
        return []
    if "://" not in index or index.startswith("file://"):
        folder = Path(unquote(urlparse(index).path)) if index.startswith("file://") else Path(index)
        return ["--no-index", "--find-links", str(folder.resolve())]
    return ["--index-url", index]


def _target_args(platform: Platform, python: str, glibc: str | None) -> list[str]:
    args = ["--only-binary=:all:", "--implementation", "cp", "--python-version", python]
    for tag in platform_tags(platform, glibc):
        args += ["--platform", tag]
    return args


def _constraints(conda_packages: Sequence[LockedPackage]) -> list[str]:
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


def _run_pip(args: list[str], what: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", *args]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise ToolError(f"pip ran longer than {PIP_TIMEOUT_S} s while {what}") from None
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-12:])
        raise ToolError(
            f"pip failed while {what}:\n{tail}",
            "check the pip index (--pip-index) offers wheels for the target platform and "
            "python, and that the requirement agrees with the conda packages",
        )
    return proc


def lock_requirements(
    requirements: Sequence[str],
    platform: Platform,
    python: str,
    glibc: str | None,
    conda_packages: Sequence[LockedPackage],
    index: str | None = None,
) -> list[LockedPackage]:
    """Exact wheels for ``requirements`` and their dependencies on the target, minus whatever
    the conda side already provides (numpy from conda is not pip-installed again)."""
    conda_names = {canonicalize_name(p.name) for p in conda_packages if p.manager == "conda"}
    with tempfile.TemporaryDirectory(prefix="envfactory-pip-") as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text("\n".join(_constraints(conda_packages)) + "\n", encoding="utf-8")
        report = Path(tmp) / "report.json"
        args = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
        args += ["--target", str(Path(tmp) / "target"), "-c", str(constraints)]
        args += _target_args(platform, python, glibc) + _index_args(index) + list(requirements)
        _run_pip(args, f"resolving {' '.join(requirements)} for {platform}, python {python}")
        data = json.loads(report.read_text(encoding="utf-8"))
    out = []
    for item in data.get("install", []):
        meta = item["metadata"]
        name = canonicalize_name(meta["name"])
        if name in conda_names:
            continue
        info = item.get("download_info", {})
        url = info.get("url", "")
        hashes = info.get("archive_info", {}).get("hashes", {})
        sha256 = hashes.get("sha256") or _hash_from(info) or _sha256_of_local(url)
        if not sha256:
            raise ToolError(f"pip gave no sha256 for {name} {meta['version']} ({url})")
        requires = tuple(r for r in meta.get("requires_dist", []) if "extra ==" not in r)
        out.append(
            LockedPackage(
                manager="pip",
                name=name,
                version=meta["version"],
                platform=platform,
                url=url,
                sha256=sha256,
                depends=requires,
            )
        )
    return sorted(out, key=lambda p: p.name)


def _hash_from(info: dict[str, object]) -> str | None:
    archive = info.get("archive_info")
    if isinstance(archive, dict):
        text = archive.get("hash")
        if isinstance(text, str) and text.startswith("sha256="):
            return text.removeprefix("sha256=")
    return None


def _sha256_of_local(url: str) -> str | None:
    if not url.startswith("file://"):
        return None
    return hashlib.sha256(Path(unquote(urlparse(url).path)).read_bytes()).hexdigest()


def install_wheels(
    packages: Sequence[LockedPackage],
    prefix: Path,
    platform: Platform,
    python: str,
    glibc: str | None,
) -> None:
    """Install exactly the locked wheels into the prefix's site-packages, checking each sha256
    (pip ``--require-hashes``), for the target platform and Python, without dependencies."""
    wheels = [p for p in packages if p.manager == "pip"]
    if not wheels:
        return
    target = site_packages(prefix, platform, python)
    with tempfile.TemporaryDirectory(prefix="envfactory-pip-") as tmp:
        reqs = Path(tmp) / "requirements.txt"
        lines = [f"{p.name} @ {p.url} --hash=sha256:{p.sha256}" for p in wheels]
        reqs.write_text("\n".join(lines) + "\n", encoding="utf-8")
        args = ["install", "--no-deps", "--require-hashes", "--no-compile", "--quiet"]
        args += ["--target", str(target), "-r", str(reqs), "--no-index"]
        args += _target_args(platform, python, glibc)
        _run_pip(args, f"installing {len(wheels)} locked wheels into {prefix}")
