"""Verify stage: does an environment hold exactly the packages of its lock, and are their
files still the ones installed?

Conda packages are read from ``conda-meta/*.json``, pip packages from the ``*.dist-info``
folders of site-packages, and compared with the lock by name: missing, extra, different
(version, build, or a hash both sides record).

Then the files, as conda's health checks do (``conda doctor``: missing and altered files): every
file a conda record lists in ``paths_data`` must exist, and a regular file must have the
recorded size and sha256 (``sha256_in_prefix`` where the prefix was patched into it). A record
without ``paths_data`` (written by another tool) is checked against ``info/paths.json`` of its
package in the shared package cache when the cache holds it.
"""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from envfactory import untrusted
from envfactory.catalog.model import PLATFORMS, Platform, host_platform
from envfactory.errors import EnvfactoryError, UserInputError
from envfactory.install.create import MARKER
from envfactory.lockfile.models import LockedPackage


@dataclass(frozen=True)
class Installed:
    manager: str
    name: str
    version: str
    build: str
    md5: str | None
    sha256: str | None

    def describe(self) -> str:
        return f"{self.name} {self.version}" + (f" {self.build}" if self.build else " (pip)")


@dataclass(frozen=True)
class Difference:
    name: str
    manager: str
    locked: str
    installed: str


@dataclass(frozen=True)
class FileProblem:
    package: str  # name version build
    path: str  # relative to the prefix
    problem: str  # "missing" or what differs


@dataclass(frozen=True)
class VerifyReport:
    prefix: Path
    lock: Path
    platform: Platform
    missing: tuple[LockedPackage, ...]
    extra: tuple[Installed, ...]
    different: tuple[Difference, ...]
    checked: int
    missing_files: tuple[FileProblem, ...] = ()
    altered_files: tuple[FileProblem, ...] = ()
    files_checked: int = 0

    @property
    def identical(self) -> bool:
        return not (
            self.missing or self.extra or self.different or self.missing_files or self.altered_files
        )


def _conda_records(prefix: Path) -> list[Installed]:
    meta = prefix / "conda-meta"
    if not meta.is_dir():
        raise UserInputError(
            f"{prefix} is not a conda environment (no conda-meta/)", "pass the prefix of an env"
        )
    out = []
    for path in sorted(meta.glob("*.json")):
        if path.name == MARKER:
            continue
        rec = read_record(path)
        out.append(
            Installed(
                "conda",
                rec["name"],
                str(rec["version"]),
                str(rec.get("build", "")),
                rec.get("md5"),
                rec.get("sha256"),
            )
        )
    return out


def read_record(path: Path) -> dict[str, Any]:
    """A conda-meta/<package>.json record, or a UserInputError naming the file: a prefix is
    untrusted input too (docs/security.md)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        record = None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("name"), str)
        or not isinstance(record.get("version"), str | int | float)
    ):
        raise UserInputError(
            f"{path} is not a conda package record (JSON with a name and a version)",
            "the environment is damaged: re-create it with 'envfactory create --force'",
        )
    return record


def _pip_records(prefix: Path) -> list[Installed]:
    from packaging.utils import canonicalize_name

    conda_owned: set[str] = set()
    for path in (prefix / "conda-meta").glob("*.json"):
        if path.name != MARKER:
            rec = read_record(path)
            conda_owned.update(f for f in rec.get("files", []) if isinstance(f, str))
    out = []
    for meta in sorted(prefix.glob("[Ll]ib/**/site-packages/*.dist-info/METADATA")):
        relative = meta.relative_to(prefix).as_posix()
        if relative in conda_owned:
            continue
        fields: dict[str, str] = {}
        for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        out.append(
            Installed("pip", canonicalize_name(fields["Name"]), fields["Version"], "", None, None)
        )
    return out


def _lock_of(prefix: Path, lock: Path | None) -> tuple[Path, Platform | None]:
    if not prefix.is_dir():
        raise UserInputError(
            f"{prefix} is missing (no such directory)"
            if not prefix.exists()
            else f"{prefix} is not a directory",
            "give the prefix of an environment: envfactory verify -p PREFIX (or -n NAME)",
        )
    marker = prefix / "conda-meta" / MARKER
    recorded: dict[str, str] = {}
    if marker.is_file():  # a damaged marker is an error with a hint (untrusted.parse_marker)
        text = marker.read_bytes().decode("utf-8", "replace")
        recorded = untrusted.parse_marker(text, str(marker), PLATFORMS)
    if lock is not None:
        return lock, cast(Platform | None, recorded.get("platform"))
    if "lock" in recorded:
        return Path(recorded["lock"]), cast(Platform, recorded["platform"])
    raise UserInputError(
        f"{prefix} does not say which lock built it", "pass --lock path/to/conda-lock.yml"
    )


def verify_environment(
    prefix: Path, lock: Path | None = None, platform: Platform | None = None
) -> VerifyReport:
    from envfactory.install.journal import interrupted
    from envfactory.lockfile.read import read_lock

    interrupted(prefix)  # an update in place still running, or cut short and not undone
    lock_path, recorded_platform = _lock_of(prefix, lock)
    chosen = platform or recorded_platform or host_platform()
    contents = read_lock(lock_path)
    locked = {(p.manager, p.name): p for p in contents.packages if p.platform == chosen}
    installed = {(r.manager, r.name): r for r in _conda_records(prefix) + _pip_records(prefix)}
    missing = tuple(locked[k] for k in sorted(locked.keys() - installed.keys()))
    extra = tuple(installed[k] for k in sorted(installed.keys() - locked.keys()))
    different = []
    for key in sorted(locked.keys() & installed.keys()):
        want, have = locked[key], installed[key]
        reasons = []
        if want.version != have.version:
            reasons.append("version")
        if want.manager == "conda" and want.build != have.build:
            reasons.append("build")
        for algorithm in ("md5", "sha256"):
            a, b = getattr(want, algorithm), getattr(have, algorithm)
            if a and b and a != b:
                reasons.append(algorithm)
        if reasons:
            different.append(
                Difference(
                    want.name,
                    want.manager,
                    want.describe(),
                    f"{have.describe()} ({', '.join(reasons)} differ)",
                )
            )
    missing_files, altered_files, files = check_files(prefix)
    return VerifyReport(
        prefix=prefix,
        lock=lock_path,
        platform=chosen,
        missing=missing,
        extra=extra,
        different=tuple(different),
        checked=len(locked),
        missing_files=tuple(missing_files),
        altered_files=tuple(altered_files),
        files_checked=files,
    )


def _paths_of(record: dict[str, Any]) -> list[dict[str, Any]] | None:
    data = record.get("paths_data")
    if isinstance(data, dict) and isinstance(data.get("paths"), list):
        return [p for p in data["paths"] if isinstance(p, dict)]
    from envfactory.cache.pkgcache import PackageCache

    sha = record.get("sha256")
    if not isinstance(sha, str) or not untrusted.SHA256.fullmatch(sha):
        return None
    cached = PackageCache().entry(sha)
    try:
        doc = json.loads((cached / "info" / "paths.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return [p for p in doc.get("paths", []) if isinstance(p, dict)]


def check_files(prefix: Path) -> tuple[list[FileProblem], list[FileProblem], int]:
    """Missing and altered files of the conda packages, and how many files were checked."""
    from envfactory.cache.pathcheck import check_relative

    missing: list[FileProblem] = []
    altered: list[FileProblem] = []
    checked = 0
    for path in sorted((prefix / "conda-meta").glob("*.json")):
        if path.name == MARKER:
            continue
        record = read_record(path)
        what = f"{record['name']} {record['version']} {record.get('build', '')}".strip()
        for entry in _paths_of(record) or []:
            rel = entry.get("_path")
            if not isinstance(rel, str):
                continue
            try:
                check_relative(what, rel)
            except EnvfactoryError as exc:
                altered.append(FileProblem(what, rel, exc.message))
                continue
            checked += 1
            full = prefix / rel
            try:
                st = full.lstat()
            except OSError:
                missing.append(FileProblem(what, rel, "missing"))
                continue
            kind = entry.get("path_type", "hardlink")
            if kind in ("softlink", "directory") or stat.S_ISLNK(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                altered.append(FileProblem(what, rel, "not a regular file"))
                continue
            if kind != "hardlink":
                continue  # entry points and the like: written at install time
            patched = bool(entry.get("prefix_placeholder"))
            want = entry.get("sha256_in_prefix") if patched else entry.get("sha256")
            size = None if patched else entry.get("size_in_bytes")
            if isinstance(size, int) and st.st_size != size:
                altered.append(FileProblem(what, rel, f"{st.st_size} bytes, recorded {size}"))
            elif isinstance(want, str) and _sha256(full) != want:
                problem = "sha256 differs"
                if st.st_nlink > 1:  # a hard link into the package cache: the edit is shared
                    problem += (
                        f" (a file shared by {st.st_nlink} hard links: the package cache "
                        "and the environments linked from it; an edit in one shows in all)"
                    )
                altered.append(FileProblem(what, rel, problem))
    return missing, altered, checked


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
