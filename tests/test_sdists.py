"""Sdist-only requirements (network): locked with their sha256, a vetted pure-Python one built
at create time into a wheel and installed, a compiled one refused before anything is
installed (even when --allow-build names it), and wrapt 1.12.1 built with its own pure-Python
switch."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfactory.errors import ToolError
from envfactory.install import pipside
from envfactory.lockfile.models import LockedPackage
from envfactory.solve.pypi import PipTarget, is_sdist, lock_target


def _lock(requirement: str) -> list[LockedPackage]:
    return lock_target(PipTarget((requirement,), "linux-64", "3.11", "2.17"))


@pytest.mark.network
@pytest.mark.slow
def test_pure_python_sdist_is_locked_by_hash_and_built_at_create(tmp_path: Path) -> None:
    (termcolor,) = _lock("termcolor==1.1.0")  # TF 2.4/2.5 require termcolor~=1.1.0
    assert is_sdist(termcolor)
    assert termcolor.filename == "termcolor-1.1.0.tar.gz"
    assert len(termcolor.sha256 or "") == 64
    prefix = tmp_path / "env"
    prepared = pipside.prepare([termcolor], tmp_path / "cache", platform="linux-64")
    assert prepared.built == ("termcolor 1.1.0",)  # vetted: no --allow-build
    pipside.install(prepared, prefix, prefix, "linux-64", "3.11", {})
    site = prefix / "lib/python3.11/site-packages"
    assert (site / "termcolor.py").is_file()
    assert list(site.glob("termcolor-1.1.0.dist-info"))


def _cext_sdist(folder: Path) -> LockedPackage:
    """An sdist with a C source (not vetted): setup.py, cext.c, PKG-INFO."""
    import hashlib
    import io
    import tarfile

    path = folder / "cext-1.0.tar.gz"
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in {
            "setup.py": "from setuptools import setup\nsetup(name='cext', version='1.0')\n",
            "src/cext.c": "int main(void) { return 0; }\n",
            "PKG-INFO": "Metadata-Version: 1.1\nName: cext\nVersion: 1.0\n",
        }.items():
            member = tarfile.TarInfo(f"cext-1.0/{rel}")
            member.size = len(text.encode())
            tar.addfile(member, io.BytesIO(text.encode()))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return LockedPackage("pip", "cext", "1.0", "linux-64", path.as_uri(), sha256=sha)


@pytest.mark.network
@pytest.mark.slow
def test_compiled_sdist_is_refused_before_anything_is_installed(tmp_path: Path) -> None:
    locked = [*_lock("termcolor==1.1.0"), _cext_sdist(tmp_path / "sdists")]
    assert all(is_sdist(p) for p in locked)
    prefix = tmp_path / "env"
    with pytest.raises(ToolError) as info:
        pipside.prepare(locked, tmp_path / "cache", platform="linux-64", allow_build=["cext"])
    assert "cext 1.0" in info.value.message
    assert "cext.c" in info.value.message
    assert "termcolor" not in info.value.message  # the pure-Python one is not refused
    assert "--pip-index" in (info.value.hint or "")
    assert not prefix.exists()


@pytest.mark.network
@pytest.mark.slow
def test_wrapt_1_12_1_is_built_with_its_own_pure_python_switch(tmp_path: Path) -> None:
    """TF 2.4 - 2.6 need wrapt ~= 1.12.1, an sdist with an optional C extension: its vetted
    entry names the sdist's switch (WRAPT_INSTALL_EXTENSIONS=false), so create builds it as pure
    Python instead of refusing it; nothing compiled lands in the environment."""
    (wrapt,) = _lock("wrapt==1.12.1")
    assert is_sdist(wrapt)
    prepared = pipside.prepare([wrapt], tmp_path / "cache", platform="linux-64")
    assert prepared.built == ("wrapt 1.12.1",)  # vetted: no --allow-build
    prefix = tmp_path / "env"
    pipside.install(prepared, prefix, prefix, "linux-64", "3.11", {})
    site = prefix / "lib/python3.11/site-packages"
    assert (site / "wrapt/wrappers.py").is_file()
    assert not [p for p in site.rglob("*") if p.suffix in (".so", ".pyd")]
    assert (site / "wrapt-1.12.1.dist-info/WHEEL").read_text().count("Root-Is-Purelib: true") == 1


def test_a_build_with_a_pure_python_switch_must_give_a_pure_wheel(tmp_path: Path) -> None:
    """If the switch stopped working (a compiled module in the wheel, or a platform tag), the
    wheel is refused."""
    import zipfile

    from envfactory.install.sdistbuild import _check_pure_python

    pkg = LockedPackage("pip", "wrapt", "1.12.1", "linux-64", "file:///x", sha256="0" * 64)
    for name, member in (
        ("wrapt-1.12.1-cp311-cp311-linux_x86_64.whl", "wrapt/wrappers.py"),
        ("wrapt-1.12.1-py3-none-any.whl", "wrapt/_wrappers.cpython-311-x86_64-linux-gnu.so"),
    ):
        wheel = tmp_path / name
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(member, "")
        with pytest.raises(ToolError, match="without its C sources gave"):
            _check_pure_python(wheel, pkg)
    pure = tmp_path / "pure" / "wrapt-1.12.1-py3-none-any.whl"
    pure.parent.mkdir()
    with zipfile.ZipFile(pure, "w") as zf:
        zf.writestr("wrapt/wrappers.py", "")
    _check_pure_python(pure, pkg)


def test_a_changed_sdist_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "pkg-1.0.tar.gz"
    archive.write_bytes(b"not what was locked")
    pkg = LockedPackage(
        manager="pip",
        name="pkg",
        version="1.0",
        platform="linux-64",
        url=archive.as_uri(),
        sha256="0" * 64,
    )
    with pytest.raises(ToolError) as info:
        pipside.prepare([pkg], tmp_path / "cache", platform="linux-64", allow_build=["pkg"])
    assert "the lock says 0000" in info.value.message
