"""A wheel kept unpacked in the package cache, and installed from there by hard links: the pip
half's counterpart of a conda package's extracted cache entry, so a warm ``create`` reads no
wheel at all: the second create of a pip-heavy combo costs what linking the cache costs
(benchmarks/bench_pip_create.py).

``unpack`` runs once per wheel, when it enters the cache: the wheel's ``METADATA`` is held to the
lock and every member to its ``RECORD`` (``wheelinstall.check_metadata``), then the members are
written under ``files/<scheme>/<path>`` with a ``manifest.json`` that lists each file with its
RECORD hash and size, the console scripts the wheel declares, and the name and version it was
checked as. ``install`` lays one unpacked wheel into a prefix as ``installer`` would (the same
scheme, the same RECORD rows, INSTALLER/REQUESTED/``direct_url.json``): files are hard-linked
from the cache (copied where the cache is on another filesystem); what depends on the prefix is
written fresh: console scripts (shebang or Windows launcher naming the environment's python,
made by installer's ``Script``), ``.data/scripts`` files whose first line is ``#!python``, and
the dist-info files pip writes.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from envfactory.cache.wheelinstall import INSTALLER_NAME, InstallScheme, check_metadata
from envfactory.errors import ToolError
from envfactory.lockfile.models import LockedPackage

MANIFEST = "manifest.json"
FILES = "files"
FORMAT = 2  # 2: each file's inode and mtime, for ``unchanged``
SCHEMES = ("purelib", "platlib", "headers", "scripts", "data")


class Tree(NamedTuple):
    """One unpacked wheel: its folder in the cache and its manifest."""

    path: Path
    manifest: dict[str, Any]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def unpack(wheel: Path, pkg: LockedPackage, target: Path) -> None:
    """Check ``wheel`` against the lock and its own RECORD, then unpack it into ``target`` (a
    new, private folder the caller publishes)."""
    from installer.sources import WheelFile
    from installer.utils import parse_entrypoints

    check_metadata(wheel, pkg)
    files: list[list[object]] = []
    with WheelFile.open(wheel) as source:
        dist_info = source.dist_info_dir
        data_dir = source.data_dir
        scripts: list[list[str]] = []
        if "entry_points.txt" in source.dist_info_filenames:
            text = source.read_dist_info("entry_points.txt")
            scripts = [list(entry) for entry in parse_entrypoints(text)]
        record_file = f"{dist_info}/RECORD"
        for elements, stream, executable in source.get_contents():
            path = elements[0]
            if path == record_file or "__pycache__" in path.split("/")[:-1]:
                continue  # RECORD is written anew; installer and pip skip __pycache__ members
            scheme, rel = "purelib", path
            if path.startswith(f"{data_dir}/"):
                scheme, _sep, rel = path[len(data_dir) + 1 :].partition("/")
                if scheme not in SCHEMES or not rel:
                    raise ToolError(
                        f"{pkg.describe()}: {wheel.name} has {path}, outside the wheel schemes",
                        "the wheel is damaged or crafted; re-lock from an index you trust",
                    )
            parts = rel.split("/")
            if rel.startswith("/") or ".." in parts or "" in parts:
                raise ToolError(
                    f"{pkg.describe()}: {wheel.name} has a member outside its scheme: {path}",
                    "the wheel is damaged or crafted; re-lock from an index you trust",
                )
            data = stream.read()
            out = target / FILES / scheme / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            with out.open("xb") as handle:
                handle.write(data)
            out.chmod(0o755 if executable else 0o644)
            st = out.stat()  # what ``unchanged`` holds the file to before each later create
            files.append([scheme, rel, _record_hash(data), len(data), st.st_ino, st.st_mtime_ns])
    manifest = {
        "format": FORMAT,
        "name": pkg.name,
        "version": pkg.version,
        "distribution": source.distribution,
        "dist_info": dist_info,
        "files": files,
        "scripts": scripts,
    }
    (target / MANIFEST).write_text(json.dumps(manifest, sort_keys=True), encoding="utf-8")


def read(path: Path, pkg: LockedPackage) -> Tree | None:
    """The unpacked wheel at ``path`` if its manifest is this envfactory's format and names
    ``pkg`` (it was checked as that package when it was unpacked), else None."""
    from packaging.utils import canonicalize_name

    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None
    same = canonicalize_name(str(manifest.get("name"))) == canonicalize_name(pkg.name)
    if not same or manifest.get("version") != pkg.version:
        return None
    return Tree(path, manifest)


def unchanged(tree: Tree) -> bool:
    """Each file of ``tree`` is still the inode it was unpacked as, with its size and mtime:
    the files are hard-linked into environments, so an in-place edit in one of them (``>>``,
    an editor without a backup copy) changes the cache's file too. A changed tree is unpacked
    again before it is linked anywhere else (the conda half's per-file check does the same)."""
    files = f"{tree.path}{os.sep}{FILES}{os.sep}"
    for scheme, rel, _digest, size, inode, mtime in tree.manifest["files"]:
        try:
            st = os.lstat(f"{files}{scheme}{os.sep}{rel}")
        except OSError:
            return False
        if (st.st_ino, st.st_size, st.st_mtime_ns) != (inode, size, mtime):
            return False
    return True


# O_EXCL never opens an existing path, a symlink included; O_NOFOLLOW exists on POSIX only,
# O_BINARY on Windows only (without it the C runtime writes LF as CRLF)
_NEW_FILE = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
)


def _write_new(target: str, data: bytes, mode: int) -> None:
    fd = os.open(target, _NEW_FILE, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _place(
    source: str | None, data: bytes, target: str, written: set[str], mode: int, made: set[str]
) -> None:
    """``target`` made a hard link to ``source`` (a copy where links fail), or a new file
    holding ``data``; an existing file is replaced only when this create wrote it (pip does
    that too: tensorflow-gpu 1.14.0 and tensorboard 1.14.0 both declare the ``tensorboard``
    script), never written through (it may be a conda package's, its inode the cache's)."""
    parent = os.path.dirname(target)  # noqa: PTH120
    if parent not in made:
        os.makedirs(parent, exist_ok=True)  # noqa: PTH103
        made.add(parent)
    for retry in (False, True):
        try:
            if source is None:
                _write_new(target, data, mode)
            else:
                try:
                    os.link(source, target)
                except FileExistsError:
                    raise
                except OSError:  # another filesystem, or no hard links there
                    with open(source, "rb") as handle:  # noqa: PTH123
                        _write_new(target, handle.read(), os.stat(source).st_mode & 0o777)  # noqa: PTH116
            break
        except FileExistsError:
            if retry or target not in written:
                raise
            os.unlink(target)  # noqa: PTH108 - a new inode, never written through
    written.add(target)


def install(
    tree: Tree,
    pkg: LockedPackage,
    where: InstallScheme,
    *,
    requested: bool,
    direct_url: str | None = None,
    written: set[str] | None = None,
) -> None:
    """Lay the unpacked wheel ``tree`` into ``where`` (see the module)."""
    from installer.scripts import Script

    done = set() if written is None else written
    manifest = tree.manifest
    dist_info = str(manifest["dist_info"])
    roots = {
        "purelib": str(where.purelib),
        "platlib": str(where.purelib),
        "headers": os.path.join(where.headers, str(manifest["distribution"])),  # noqa: PTH118
        "scripts": str(where.scripts),
        "data": str(where.data),
    }
    base = roots["purelib"]
    # RECORD names files relative to site-packages, in "/" form, as installer writes them
    relative = {k: os.path.relpath(v, base).replace(os.sep, "/") + "/" for k, v in roots.items()}
    relative["purelib"] = relative["platlib"] = ""
    rows: list[tuple[str, str, str]] = []
    made: set[str] = set()

    def put(target: str, source: str | None, data: bytes = b"", mode: int = 0o644) -> None:
        try:
            _place(source, data, target, done, mode, made)
        except FileExistsError:
            raise ToolError(
                f"{pkg.describe()}: installing it would overwrite {target}, which another "
                "package of the environment installed",
                "two packages of the lock install the same file; re-lock (a package both conda "
                "and pip provide is taken from conda)",
            ) from None

    files = str(tree.path / FILES)
    interpreter = where.interpreter.encode()
    sep = os.sep
    for scheme, rel, digest, size, _inode, _mtime in manifest["files"]:
        target = f"{roots[scheme]}{sep}{rel if sep == '/' else rel.replace('/', sep)}"
        source = f"{files}/{scheme}/{rel}"
        if scheme == "scripts":
            data = Path(source).read_bytes()
            if data.startswith(b"#!python"):  # installer/pip: the environment's interpreter
                data = b"#!" + interpreter + data[len(b"#!python") :]
                put(target, None, data, 0o755)
                rows.append((relative[scheme] + rel, _record_hash(data), str(len(data))))
                continue
        put(target, source)
        rows.append((relative[scheme] + rel, digest, str(size)))
    for name, module, attr, section in manifest["scripts"]:
        script = Script(name, module, attr, section)
        filename, data = script.generate(where.interpreter, where.script_kind)  # type: ignore[arg-type]
        put(os.path.join(roots["scripts"], filename), None, data, 0o755)  # noqa: PTH118
        rows.append((relative["scripts"] + filename, _record_hash(data), str(len(data))))
    extra = {"INSTALLER": INSTALLER_NAME}
    if requested:
        extra["REQUESTED"] = b""
    if direct_url is not None:
        doc = {"url": direct_url, "archive_info": {"hashes": {"sha256": pkg.sha256}}}
        extra["direct_url.json"] = (json.dumps(doc, sort_keys=True) + "\n").encode()
    info = os.path.join(base, dist_info)  # noqa: PTH118
    for name, data in extra.items():
        put(os.path.join(info, name), None, data)  # noqa: PTH118
        rows.append((f"{dist_info}/{name}", _record_hash(data), str(len(data))))
    record = os.path.join(info, "RECORD")  # noqa: PTH118
    rows.append((f"{dist_info}/RECORD", "", ""))
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)  # quoted as installer writes it
    put(record, None, text.getvalue().encode())
