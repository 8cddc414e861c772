"""Sdist-only requirements (network): locked with their sha256, a vetted pure-Python one built
at create time into a wheel and installed, a compiled one refused before anything is
installed (even when --allow-build names it)."""

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


@pytest.mark.network
@pytest.mark.slow
def test_compiled_sdist_is_refused_before_anything_is_installed(tmp_path: Path) -> None:
    locked = _lock("termcolor==1.1.0") + _lock("wrapt==1.12.1")  # wrapt: C sources, no wheel
    assert all(is_sdist(p) for p in locked)
    prefix = tmp_path / "env"
    with pytest.raises(ToolError) as info:
        pipside.prepare(locked, tmp_path / "cache", platform="linux-64", allow_build=["wrapt"])
    assert "wrapt 1.12.1" in info.value.message
    assert "_wrappers.c" in info.value.message
    assert "termcolor" not in info.value.message  # the pure-Python one is not refused
    assert "--pip-index" in (info.value.hint or "")
    assert not prefix.exists()


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
