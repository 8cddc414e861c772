"""A conda channel whose ``python`` is a real CPython 3.11 and whose ``pip``, ``setuptools`` and
``wheel`` are the real ones, for the end-to-end test of the pip half (tests/test_realpython.py).

The interpreter: the machine's own CPython 3.11 built from source with a shared libpython
(pyenv's ``~/.pyenv/versions/3.11.*``; machines/python.md of this workplace lists pyenv 3.11.7
as the machine's Python), packaged the way conda-build packages CPython:

* ``bin/python3.11`` and ``lib/libpython3.11.so.1.0`` with their ``DT_RUNPATH`` rewritten to
  ``$ORIGIN/../lib`` / ``$ORIGIN`` (pyenv links them with an absolute runpath into its own
  prefix; conda-forge's python carries ``$ORIGIN``-relative ones), in place, the string padded
  with NUL bytes as conda's binary prefix replacement does;
* ``bin/python``, ``bin/python3`` symlinks; the standard library ``lib/python3.11`` without its
  test suite, IDLE, Tk, lib2to3, ensurepip and the static ``config-3.11-*`` folder; an empty
  ``site-packages``;
* text files that name the build prefix (``_sysconfigdata_*.py``) with conda's placeholder
  instead, listed in ``paths.json`` as ``file_mode: text``, so they name the environment once
  installed.

A Debian ``/usr/bin/python3.11`` is refused: its patched ``site.py`` adds ``dist-packages``, not
the prefix's ``site-packages``, so it cannot be an environment's python.

Records: the python package is ``python 3.11.7 hab00c5b_1_cpython`` (conda-forge linux-64; that
name, version and build are in published ``conda create`` output, e.g. a conda-forge transcript
listing ``conda-forge/linux-64::python-3.11.7-hab00c5b_1_cpython`` beside ``pip-23.3.2``); its
``depends`` are those of the python 3.11.9 ``hb806964_0_cpython`` record of the Clay lock in
tests/data/real-envs (same family, five months apart; the 3.11.7 record itself is not in our
data). An interpreter other than 3.11.7 gets its own version and the build string
``envf_real_0_cpython`` (invented, and saying so). ``pip 24.0 pyhd8ed1ab_0``, ``setuptools 69.5.1
pyhd8ed1ab_0`` and ``wheel 0.43.0 pyhd8ed1ab_1`` are the Clay lock's records, their payloads the
same versions' wheels from PyPI (sha256 pinned below), laid out as conda-forge's ``noarch:
python`` packages are (``site-packages/``, ``info/link.json`` naming the console scripts). Every
other package python needs (bzip2, openssl, ...) is a stub of its Clay record: the interpreter
here links only libc/libm and uses the machine's own libssl/libffi/libz for its extensions.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from channel_builder import (
    PLACEHOLDER,
    REAL_ENVS,
    TAR_MTIME,
    TIMESTAMP_MS,
    LockRecord,
    StubPackage,
    index_channel,
    read_lock_records,
    write_package,
)

CLAY_LOCK = REAL_ENVS / (
    "pytorch2.1.2-cuda12.4-linux64-osx64-osxarm64-condalock--Clay-foundation-model.conda-lock.yml"
)
FORMAT = 1  # bump when the python package's layout changes (names the cached archive)
PY = "3.11"
PY_BUILDS = {"3.11.7": "hab00c5b_1_cpython"}
LEFT_OUT = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3"}
# (name, conda build, wheel file, URL, sha256): the Clay lock's records and the wheels of the
# same versions on PyPI
WHEELS = (
    ("pip", "pyhd8ed1ab_0", "pip-24.0-py3-none-any.whl",
     "https://files.pythonhosted.org/packages/8a/6a/19e9fe04fca059ccf770861c7d5721ab4c2aebc539889e97c7977528a53b/pip-24.0-py3-none-any.whl",
     "ba0d021a166865d2265246961bec0152ff124de910c5cc39f1156ce3fa7c69dc"),
    ("setuptools", "pyhd8ed1ab_0", "setuptools-69.5.1-py3-none-any.whl",
     "https://files.pythonhosted.org/packages/f7/29/13965af254e3373bceae8fb9a0e6ea0d0e571171b80d6646932131d6439b/setuptools-69.5.1-py3-none-any.whl",
     "c636ac361bc47580504644275c9ad802c50415c7522212252c033bd15f301f32"),
    ("wheel", "pyhd8ed1ab_1", "wheel-0.43.0-py3-none-any.whl",
     "https://files.pythonhosted.org/packages/7d/cd/d7460c9a869b16c3dd4e1e403cce337df165368c71d6af229a74699622ce/wheel-0.43.0-py3-none-any.whl",
     "55c570405f142630c6b9f72fe09d9b67cf1477fcf543ae5b8dcb1f5b7377da81"),
)  # fmt: skip


class NoInterpreter(Exception):
    pass


class Source(NamedTuple):
    executable: Path
    prefix: Path
    version: str


class Member(NamedTuple):
    path: str
    data: bytes = b""
    mode: int = 0o644
    link: str | None = None  # a symlink's target
    placeholder: bool = False


# -- the interpreter ----------------------------------------------------------------------------

_PROBE = (
    "import json, site, sys, sysconfig; p = sys.base_prefix; print(json.dumps({'v': "
    "sys.version.split()[0], 'prefix': p, 'shared': sysconfig.get_config_var('Py_ENABLE_SHARED'),"
    " 'site': site.getsitepackages([p])}))"
)


def find_source() -> Source:
    """A CPython 3.11 of this machine that can be an environment's python (see the module)."""
    candidates = sorted(Path.home().glob(".pyenv/versions/3.11*/bin/python3.11"), reverse=True)
    candidates.append(Path("/usr/bin/python3.11"))
    seen = []
    for exe in candidates:
        if not exe.is_file():
            continue
        out = subprocess.run([exe, "-I", "-c", _PROBE], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            continue
        facts = json.loads(out.stdout)
        prefix = Path(facts["prefix"])
        own_site = str(prefix / "lib" / f"python{PY}" / "site-packages")
        seen.append(f"{exe} ({facts['v']}, site-packages: {facts['site']})")
        if facts["shared"] and own_site in facts["site"]:
            return Source(exe, prefix, facts["v"])
    raise NoInterpreter(
        "no CPython 3.11 with a shared libpython whose site.py adds <prefix>/lib/python3.11/"
        f"site-packages; looked at: {'; '.join(seen) or 'none found'} (pyenv install 3.11.7)"
    )


def set_runpath(data: bytes, runpath: str) -> bytes:
    """``data`` (an x86-64 ELF) with its DT_RUNPATH/DT_RPATH string overwritten in place by
    ``runpath`` (which must be shorter), padded with NUL bytes."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _f, p_offset, p_vaddr, _pa, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        raise ValueError("no dynamic section")
    entries = [
        struct.unpack_from("<qQ", data, dynamic[0] + off) for off in range(0, dynamic[1], 16)
    ]
    strtab_vaddr = next(v for tag, v in entries if tag == 5)
    strtab = next(
        off + strtab_vaddr - va for va, off, size in loads if va <= strtab_vaddr < va + size
    )
    out = bytearray(data)
    found = False
    for tag, value in entries:
        if tag in (15, 29):  # DT_RPATH, DT_RUNPATH
            start = strtab + value
            end = out.index(b"\0", start)
            new = runpath.encode()
            if len(new) > end - start:
                raise ValueError(f"{runpath!r} is longer than the runpath it replaces")
            out[start:end] = new + b"\0" * (end - start - len(new))
            found = True
    if not found:
        raise ValueError("no runpath to replace")
    return bytes(out)


def python_members(source: Source) -> list[Member]:
    prefix = source.prefix
    stdlib = prefix / "lib" / f"python{PY}"
    old = str(prefix).encode()
    members = [
        Member(f"bin/python{PY}", set_runpath((prefix / f"bin/python{PY}").read_bytes(),
                                              "$ORIGIN/../lib"), 0o755),
        Member("bin/python3", link=f"python{PY}"),
        Member("bin/python", link=f"python{PY}"),
        Member(f"lib/libpython{PY}.so.1.0",
               set_runpath((prefix / f"lib/libpython{PY}.so.1.0").read_bytes(), "$ORIGIN"), 0o755),
        Member(f"lib/libpython{PY}.so", link=f"libpython{PY}.so.1.0"),
        Member(f"lib/python{PY}/site-packages/README.txt",
               b"This directory exists so that 3rd party packages can be installed here.\n"),
    ]  # fmt: skip
    for dirpath, dirnames, filenames in os.walk(stdlib):
        here = Path(dirpath)
        rel_dir = here.relative_to(stdlib)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d != "__pycache__"
            and not (rel_dir == Path() and (d in LEFT_OUT or d.startswith("config-")))
            and not (d == "test" and here.name in ("unittest", "sqlite3", "ctypes", "distutils"))
        )
        for name in sorted(filenames):
            path = here / name
            rel = f"lib/python{PY}/{(rel_dir / name).as_posix()}"
            if path.is_symlink():
                members.append(Member(rel, link=str(path.readlink())))
                continue
            data = path.read_bytes()
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            if old in data and not data.startswith(b"\x7fELF"):
                members.append(
                    Member(rel, data.replace(old, PLACEHOLDER.encode()), mode, None, True)
                )
            else:
                members.append(Member(rel, data, mode))
    return members


# -- packages -----------------------------------------------------------------------------------


def _add(tar: tarfile.TarFile, member: Member) -> None:
    info = tarfile.TarInfo(member.path)
    info.mtime = TAR_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if member.link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = member.link
        info.mode = 0o777
        tar.addfile(info)
        return
    info.size = len(member.data)
    info.mode = member.mode
    tar.addfile(info, io.BytesIO(member.data))


def write_real_package(
    target: Path,
    record: StubPackage,
    members: Sequence[Member],
    noarch: str | None = None,
    link: dict[str, object] | None = None,
) -> Path:
    """A ``.tar.bz2`` at ``target`` holding ``members`` (bytes, modes, symlinks) with the
    ``info/`` files conda and rattler read."""
    index: dict[str, object] = {
        "name": record.name,
        "version": record.version,
        "build": record.build,
        "build_number": record.build_number,
        "depends": list(record.depends),
        "subdir": record.subdir,
        "license": "PSF-2.0 / MIT",
        "timestamp": TIMESTAMP_MS,
    }
    if noarch:
        index["noarch"] = noarch
    paths: list[dict[str, object]] = []
    for m in sorted(members, key=lambda m: m.path):
        if m.link is not None:
            paths.append({"_path": m.path, "path_type": "softlink"})
            continue
        entry: dict[str, object] = {
            "_path": m.path,
            "path_type": "hardlink",
            "sha256": hashlib.sha256(m.data).hexdigest(),
            "size_in_bytes": len(m.data),
        }
        if m.placeholder:
            entry.update(prefix_placeholder=PLACEHOLDER, file_mode="text")
        paths.append(entry)
    info = [
        Member("info/index.json", json.dumps(index, sort_keys=True).encode()),
        Member("info/paths.json", json.dumps({"paths": paths, "paths_version": 1}).encode()),
        Member("info/files", "".join(f"{m.path}\n" for m in sorted(members)).encode()),
    ]
    if link is not None:
        info.append(Member("info/link.json", json.dumps(link, sort_keys=True).encode()))
    prefixed = [m for m in members if m.placeholder]
    if prefixed:
        text = "".join(f"{PLACEHOLDER} text {m.path}\n" for m in sorted(prefixed))
        info.append(Member("info/has_prefix", text.encode()))
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    with tarfile.open(partial, "w:bz2", compresslevel=1) as tar:
        for m in [*info, *sorted(members)]:
            _add(tar, m)
    partial.replace(target)
    return target


def fetch_wheel(folder: Path, filename: str, url: str, sha256: str) -> Path:
    """The pinned wheel in ``folder``, downloaded once; its sha256 checked every time."""
    target = folder / filename
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == sha256:
        return target
    with urllib.request.urlopen(url, timeout=120) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(f"{url}: sha256 differs from the pinned one")
    folder.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def noarch_members(wheel: Path) -> tuple[list[Member], list[str]]:
    """A pure wheel as conda-forge's ``noarch: python`` package of it: its files under
    ``site-packages/`` (INSTALLER says conda), and its console scripts for ``info/link.json``."""
    members, scripts = [], []
    with zipfile.ZipFile(wheel) as zf:
        for item in zf.infolist():
            if item.is_dir():
                continue
            data = zf.read(item)
            if item.filename.endswith(".dist-info/INSTALLER"):
                continue
            if item.filename.endswith(".dist-info/entry_points.txt"):
                section = ""
                for line in data.decode().splitlines():
                    line = line.strip()
                    if line.startswith("["):
                        section = line
                    elif section == "[console_scripts]" and "=" in line:
                        scripts.append(" = ".join(part.strip() for part in line.split("=", 1)))
            if item.filename.endswith(".dist-info/RECORD"):
                info_dir = item.filename.rsplit("/", 1)[0]
                members.append(Member(f"site-packages/{info_dir}/INSTALLER", b"conda\n"))
            members.append(Member(f"site-packages/{item.filename}", data))
    return members, scripts


def _closure(records: Iterable[LockRecord], roots: Iterable[str]) -> list[LockRecord]:
    by_name = {r.name: r for r in records}
    todo, out = list(roots), {}
    while todo:
        name = todo.pop()
        if name in out or name not in by_name:
            continue
        out[name] = by_name[name]
        todo += [d.split()[0] for d in by_name[name].depends]
    return list(out.values())


def build_real_channel(cache: Path) -> tuple[Path, Source]:
    """The channel (conda-forge's place in a channel map), made once in ``cache`` and reused
    by later runs (the python package alone is ~17 MB of bz2 and indexing reads it whole)."""
    source = find_source()
    channel = cache / f"channel-format{FORMAT}-{source.prefix.name}"
    if (channel / ".complete").is_file():
        return channel, source
    shutil.rmtree(channel, ignore_errors=True)
    partial = cache / f"{channel.name}.part"
    shutil.rmtree(partial, ignore_errors=True)
    records = read_lock_records(CLAY_LOCK, "linux-64")
    clay_python = next(r for r in records if r.name == "python")
    build = PY_BUILDS.get(source.version, "envf_real_0_cpython")
    python = StubPackage("python", source.version, build, "linux-64", depends=clay_python.depends)
    write_real_package(partial / "linux-64" / python.filename, python, python_members(source))
    real = {"python", *(w[0] for w in WHEELS)}
    for name, conda_build, filename, url, sha256 in WHEELS:
        rec = next(r for r in records if r.name == name)
        assert rec.build == conda_build, (name, rec.build)
        members, scripts = noarch_members(fetch_wheel(cache / "wheels", filename, url, sha256))
        link = {
            "noarch": {"type": "python", "entry_points": scripts},
            "package_metadata_version": 1,
        }
        stub = StubPackage(name, rec.version, rec.build, "noarch", depends=rec.depends)
        write_real_package(partial / "noarch" / stub.filename, stub, members, "python", link)
    roots = [d.split()[0] for d in clay_python.depends]
    roots += [d.split()[0] for r in records if r.name in real for d in r.depends]
    for rec in _closure(records, roots):
        if rec.name not in real:
            write_package(partial, rec.stub())
    index_channel(partial)
    (partial / ".complete").write_text(f"{source.executable} {source.version}\n")
    partial.rename(channel)
    return channel, source
