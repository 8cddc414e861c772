"""The one place that uses conda-lock's Python API: its lockfile models and writer (so the file is
conda-lock's own v1 format, readable by ``conda-lock render`` and ``conda-lock install``) and its
content hash. ``write.py`` is its caller; locks are read back by ``read.py``, which holds them to
the same models without importing conda-lock. (``--solver conda-lock`` runs conda-lock's CLI as
a solver: ``solve/condalock_cli.py``.)

conda-lock is imported inside the functions: ``import conda_lock.lockfile`` costs ~0.9 s and must
stay off the CLI's start-up path (docs/benchmarks.md: the imports of each command).
"""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from envfactory.catalog.platforms import Platform
from envfactory.lockfile.models import LOCK_FILE, LockedPackage, dependency_name


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
