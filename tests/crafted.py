"""Crafted conda packages and locks for the cache and safety tests: real ``.tar.bz2`` and
``.conda`` archives whose ``info/paths.json`` and members the test chooses (hostile ones
included), and a conda-lock.yml written by conda-lock's own writer that names them with their
real hashes."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TAR_MTIME = 1561939200


@dataclass(frozen=True)
class Crafted:
    """One package to write. ``files``: payload members; ``symlinks``: member -> target;
    ``paths``: the paths.json entries (default: made from files and symlinks, correct);
    ``extra_members``: raw tar members not listed anywhere (name -> bytes)."""

    name: str
    version: str = "1.0"
    build: str = "h0_0"
    subdir: str = "linux-64"
    files: Mapping[str, bytes] = field(default_factory=dict)
    symlinks: Mapping[str, str] = field(default_factory=dict)
    paths: Sequence[Mapping[str, Any]] | None = None
    index: Mapping[str, Any] = field(default_factory=dict)
    fmt: str = "tar.bz2"

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.build}.{self.fmt}"

    def paths_entries(self) -> list[dict[str, Any]]:
        if self.paths is not None:
            return [dict(p) for p in self.paths]
        out: list[dict[str, Any]] = [
            {
                "_path": rel,
                "path_type": "hardlink",
                "sha256": hashlib.sha256(data).hexdigest(),
                "size_in_bytes": len(data),
            }
            for rel, data in sorted(self.files.items())
        ]
        out += [{"_path": rel, "path_type": "softlink"} for rel in sorted(self.symlinks)]
        return sorted(out, key=lambda e: str(e["_path"]))


def _member(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), TAR_MTIME, mode
    tar.addfile(info, io.BytesIO(data))


def _link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, TAR_MTIME
    tar.addfile(info)


def _tar(members: Sequence[tuple[str, bytes | None, str | None]], compression: str) -> bytes:
    buffer = io.BytesIO()
    mode = "w:bz2" if compression == "bz2" else "w"
    with tarfile.open(fileobj=buffer, mode=mode) as tar:  # type: ignore[call-overload]
        for name, data, target in members:
            if target is not None:
                _link(tar, name, target)
            else:
                assert data is not None
                _member(tar, name, data, 0o755 if name.startswith("bin/") else 0o644)
    return buffer.getvalue()


def write_crafted(channel: Path, pkg: Crafted) -> Path:
    """Write ``pkg`` into ``channel/<subdir>/`` as a real archive and return its path."""
    index = {
        "name": pkg.name,
        "version": pkg.version,
        "build": pkg.build,
        "build_number": 0,
        "depends": [],
        "subdir": pkg.subdir,
        "timestamp": TAR_MTIME * 1000,
        **pkg.index,
    }
    info: list[tuple[str, bytes | None, str | None]] = [
        ("info/index.json", json.dumps(index, sort_keys=True).encode(), None),
        (
            "info/paths.json",
            json.dumps({"paths": pkg.paths_entries(), "paths_version": 1}).encode(),
            None,
        ),
    ]
    payload: list[tuple[str, bytes | None, str | None]] = [
        (rel, data, None) for rel, data in sorted(pkg.files.items())
    ]
    payload += [(rel, None, target) for rel, target in sorted(pkg.symlinks.items())]
    target = channel / pkg.subdir / pkg.filename
    target.parent.mkdir(parents=True, exist_ok=True)
    if pkg.fmt == "tar.bz2":
        target.write_bytes(_tar(info + payload, "bz2"))
        return target
    import zstandard

    stem = pkg.filename.removesuffix(".conda")
    zstd = zstandard.ZstdCompressor(level=3)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("metadata.json", json.dumps({"conda_pkg_format_version": 2}))
        archive.writestr(f"pkg-{stem}.tar.zst", zstd.compress(_tar(payload, "")))
        archive.writestr(f"info-{stem}.tar.zst", zstd.compress(_tar(info, "")))
    target.write_bytes(buffer.getvalue())
    return target


def write_lock(
    lock_dir: Path, archives: Mapping[Path, Crafted], platform: str = "linux-64"
) -> Path:
    """A conda-lock.yml (conda-lock's writer) naming each archive by its file:// URL with its
    real sha256 and md5."""
    from envfactory.lockfile.condalock_adapter import render_lock
    from envfactory.lockfile.models import LockedPackage

    packages = []
    for path, pkg in archives.items():
        data = path.read_bytes()
        packages.append(
            LockedPackage(
                manager="conda",
                name=pkg.name,
                version=pkg.version,
                platform=platform,  # type: ignore[arg-type]
                url=path.resolve().as_uri(),
                build=pkg.build,
                subdir=pkg.subdir,
                channel=path.resolve().parent.parent.as_uri(),
                md5=hashlib.md5(data).hexdigest(),
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )
    text = render_lock(
        sorted(packages, key=lambda p: p.name),
        platforms=[platform],  # type: ignore[list-item]
        channels=["crafted"],
        sources=["crafted"],
        content_hash={platform: "0" * 64},
        custom_metadata={},
    )
    lock_dir.mkdir(parents=True, exist_ok=True)
    out = lock_dir / "conda-lock.yml"
    out.write_text(text, encoding="utf-8")
    return out


def crafted_lock(tmp: Path, packages: Sequence[Crafted], platform: str = "linux-64") -> Path:
    """Write the packages into ``tmp/channel`` and a lock naming them into ``tmp/lock``."""
    archives = {write_crafted(tmp / "channel", p): p for p in packages}
    return write_lock(tmp / "lock", archives, platform)
