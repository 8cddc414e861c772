"""The one place that uses conda-lock's Python API: its lockfile models and writer (so the file is
conda-lock's own v1 format, readable by ``conda-lock render`` and ``conda-lock install``) and its
content hash. Locks are read back by ``lockfile/read.py``, which holds them to the same models
without importing conda-lock (``read_lock`` is re-exported here for the callers that have it).

conda-lock is imported inside the functions: ``import conda_lock.lockfile`` costs ~0.9 s and must
stay off the CLI's start-up path (docs/benchmarks.md: the imports of each command).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from envfactory.catalog.model import Platform
from envfactory.errors import ToolError
from envfactory.lockfile.models import LockedPackage, dependency_name
from envfactory.lockfile.read import LockContents, read_lock

__all__ = ["LockContents", "content_hashes", "read_lock", "render_lock", "solve_with_cli"]

LOCK_FILE = "conda-lock.yml"


@contextlib.contextmanager
def _conda_lock_imports() -> Iterator[None]:
    """conda-lock's vendored conda warns (PendingDeprecationWarning) when imported; that is
    conda-lock's business, not our users'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def content_hashes(env_files: Mapping[Platform, Path], virtual_packages: Path) -> dict[str, str]:
    """conda-lock's per-platform input hash of the rendered environment file(s), computed by
    conda-lock's own functions (what ``conda-lock lock --check-input-hash`` compares)."""
    with _conda_lock_imports():
        from conda_lock.content_hash import compute_content_hashes
        from conda_lock.src_parser import make_lock_spec
        from conda_lock.virtual_package import virtual_package_repo_from_specification

    vpr = virtual_package_repo_from_specification(virtual_packages)
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="envfactory-mapping-") as tmp:
        # An empty PyPI->conda name mapping: pip names map to themselves and conda-lock never
        # downloads its default mapping from GitHub (which hangs offline).
        mapping = Path(tmp) / "mapping.json"
        mapping.write_text("{}", encoding="utf-8")
        for platform, path in env_files.items():
            spec = make_lock_spec(
                src_files=[path], platform_overrides=[platform], mapping_url=str(mapping)
            )
            out[platform] = compute_content_hashes(spec, vpr)[platform]
    return dict(sorted(out.items()))


def _dependencies(pkg: LockedPackage) -> dict[str, str]:
    deps: dict[str, str] = {}
    for dep in pkg.depends:
        name = dependency_name(dep)
        rest = dep.strip()[len(name) :].strip()
        deps[name] = f"{deps[name]},{rest}" if name in deps and rest else rest
    return dict(sorted(deps.items()))


def render_lock(
    packages: Sequence[LockedPackage],
    *,
    platforms: Sequence[Platform],
    channels: Sequence[str],
    sources: Sequence[str],
    content_hash: Mapping[str, str],
    custom_metadata: Mapping[str, str],
) -> str:
    """The text of ``conda-lock.yml``, written by conda-lock's own writer (v1 format)."""
    with _conda_lock_imports():
        from conda_lock.lockfile import write_conda_lock_file
        from conda_lock.lockfile.v2prelim.models import (
            HashModel,
            LockedDependency,
            Lockfile,
            LockMeta,
        )

    deps = [
        LockedDependency(
            name=p.name,
            version=p.version,
            manager=p.manager,
            platform=p.platform,
            dependencies=_dependencies(p),
            url=p.url,
            hash=HashModel(md5=p.md5, sha256=p.sha256),
            build=p.build or None,
            categories={"main"},
        )
        for p in packages
    ]
    lock = Lockfile(
        package=deps,
        metadata=LockMeta(
            content_hash=dict(content_hash),
            channels=list(channels),
            platforms=list(platforms),
            sources=list(sources),
            custom_metadata=dict(sorted(custom_metadata.items())),
        ),
    )
    with tempfile.TemporaryDirectory(prefix="envfactory-lock-") as tmp:
        # The writer names the file in its header, so write under the final name.
        path = Path(tmp) / LOCK_FILE
        write_conda_lock_file(lock, path, metadata_choices=set())
        return path.read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# ``--solver conda-lock``: the real ``conda-lock lock`` CLI with the user's conda binary.

CONDA_EXECUTABLES = ("micromamba", "mamba", "conda")
CLI_TIMEOUT_S = 1800


def find_conda(environ: Mapping[str, str]) -> str | None:
    """The user's conda, mamba or micromamba (``CONDA_EXE``/``MAMBA_EXE`` first, then PATH).
    Never ensureconda: without a binary it retries downloads for over a minute."""
    for var in ("MAMBA_EXE", "CONDA_EXE"):
        exe = environ.get(var)
        if exe and Path(exe).is_file():
            return exe
    for name in CONDA_EXECUTABLES:
        found = shutil.which(name, path=environ.get("PATH"))
        if found:
            return found
    return None


def solve_with_cli(
    env_file: Path,
    virtual_packages: Path,
    platform: Platform,
    channels: Sequence[str],
    environ: Mapping[str, str],
) -> list[LockedPackage]:
    """Run ``conda-lock lock`` for one platform and read back its packages."""
    conda = find_conda(environ)
    if conda is None:
        raise ToolError(
            "--solver conda-lock needs conda, mamba or micromamba, and none was found "
            "(looked at MAMBA_EXE, CONDA_EXE and PATH)",
            "install micromamba (https://mamba.readthedocs.io) and put it on PATH, "
            "or use the default solver (--solver rattler), which needs no conda",
        )
    script = Path(sys.executable).parent / "conda-lock"
    command = [str(script) if script.exists() else "conda-lock", "lock", "--conda", conda]
    if Path(conda).name.startswith("micromamba"):
        command.append("--micromamba")
    elif Path(conda).name.startswith("mamba"):
        command.append("--mamba")
    with tempfile.TemporaryDirectory(prefix="envfactory-conda-lock-") as tmp:
        out = Path(tmp) / LOCK_FILE
        command += ["-f", str(env_file), "--virtual-package-spec", str(virtual_packages)]
        command += ["-p", platform, "--lockfile", str(out)]
        for url in channels:
            command += ["-c", url]
        try:
            proc = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=CLI_TIMEOUT_S,
                env=dict(environ),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ToolError(f"conda-lock lock ran longer than {CLI_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise ToolError(
                f"conda-lock lock failed for {platform} (exit {proc.returncode}):\n{tail}",
                "the default solver (--solver rattler) gives a plainer explanation",
            )
        lock = read_lock(out)
    return [p for p in lock.packages if p.platform == platform and p.manager == "conda"]
