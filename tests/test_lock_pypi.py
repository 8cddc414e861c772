"""The pip side of a lock: uv against the real PyPI (network) for the target platform and Python,
not this machine's; and, offline, how a file is picked from uv's pylock.toml for a target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfactory.catalog.loader import load_catalog
from envfactory.errors import ToolError
from envfactory.lockfile.models import LockedPackage
from envfactory.solve.pypi import PipTarget, lock_requirements, packages_from_pylock, uv_platform

DATA = Path(__file__).parent / "data" / "pypi"


@pytest.mark.network
@pytest.mark.slow
def test_tf114_closure_for_py37_linux_from_pypi() -> None:
    numpy = LockedPackage(
        manager="conda", name="numpy", version="1.16.4", platform="linux-64", url="x"
    )
    combo = load_catalog().combo("tf114-cuda100")
    wheels = {
        p.name: p
        for p in lock_requirements(
            ["tensorflow-gpu==1.14.0"],
            platform="linux-64",
            python="3.7",
            glibc="2.17",
            conda_packages=[numpy],
            index=None,
            constraints=combo.constraints_for("linux-64"),
        )
    }
    tf = wheels["tensorflow-gpu"]
    assert tf.url.startswith("https://files.pythonhosted.org/")
    assert tf.filename == "tensorflow_gpu-1.14.0-cp37-cp37m-manylinux1_x86_64.whl"
    assert len(tf.sha256 or "") == 64
    assert "numpy" not in wheels  # the conda side provides it
    # the companion constraints held: the versions TF 1.14 imports with
    # protobuf 3.20.x is what TF's own error tells users to downgrade to (breakage from 4.21)
    assert wheels["protobuf"].version.startswith(("3.19.", "3.20."))
    assert wheels["h5py"].version == "2.10.0"
    assert wheels["gast"].version == "0.2.2"
    assert wheels["gast"].filename == "gast-0.2.2.tar.gz"  # sdist-only release, locked by hash
    # markers evaluated for python 3.7, not the host's: markdown needs importlib-metadata there
    assert {"importlib-metadata", "zipp", "typing-extensions"} <= set(wheels)
    # the captured closure (the stub wheels' source) was resolved under the old protobuf<3.20
    # bound, which issue 24 corrected to <3.21 (tensorflow#56266): protobuf is held above, the
    # rest of the closure must be the captured one file for file
    captured = json.loads((DATA / "tf114-cuda100-linux-64.json").read_text())
    names = {w["filename"] for w in captured["wheels"] if w["name"] not in ("numpy", "protobuf")}
    assert {p.filename for p in wheels.values() if p.name != "protobuf"} == names


def _pylock(*entries: str) -> str:
    return 'lock-version = "1.0"\ncreated-by = "test"\n' + "".join(entries)


def _entry(name: str, version: str, wheels: list[str], sdist: str | None = None) -> str:
    base = "https://files.example/"
    lines = [f'\n[[packages]]\nname = "{name}"\nversion = "{version}"\n']
    if sdist:
        lines.append(f'sdist = {{ url = "{base}{sdist}", hashes = {{ sha256 = "{"a" * 64}" }} }}\n')
    items = ", ".join(
        f'{{ url = "{base}{w}", hashes = {{ sha256 = "{"b" * 64}" }} }}' for w in wheels
    )
    lines.append(f"wheels = [{items}]\n")
    return "".join(lines)


def _target(
    platform: str = "linux-64", python: str = "3.11", glibc: str | None = "2.27"
) -> PipTarget:
    return PipTarget(requirements=("x",), platform=platform, python=python, glibc=glibc)  # type: ignore[arg-type]


def test_the_most_specific_wheel_the_target_accepts_is_picked() -> None:
    text = _pylock(
        _entry(
            "charset-normalizer",
            "3.5.3",
            [
                "charset_normalizer-3.5.3-py3-none-any.whl",
                "charset_normalizer-3.5.3-cp37-abi3-manylinux1_x86_64.manylinux_2_5_x86_64.whl",
            ],
        )
    )
    (pkg,) = packages_from_pylock(text, _target())
    assert pkg.filename.endswith("manylinux_2_5_x86_64.whl")  # a binary wheel before py3-none-any


def test_glibc_floor_is_exact_although_uv_resolves_for_2_28() -> None:
    # uv knows no manylinux_2_27 platform: a 2.27 target is resolved as 2_28, and the pick must
    # refuse a version whose only wheel needs glibc 2.28
    assert uv_platform("linux-64", "2.27") == "x86_64-manylinux_2_28"
    ok = _entry("tensorflow", "2.21.0", ["tensorflow-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl"])
    (pkg,) = packages_from_pylock(_pylock(ok), _target())
    assert pkg.version == "2.21.0"
    too_new = _entry("numpy", "9.0", ["numpy-9.0-cp311-cp311-manylinux_2_28_x86_64.whl"])
    with pytest.raises(ToolError) as info:
        packages_from_pylock(_pylock(too_new), _target())
    assert "numpy 9.0 has no file for linux-64, python 3.11, glibc 2.27" in info.value.message


def test_a_version_without_a_fitting_wheel_is_locked_as_its_sdist() -> None:
    text = _pylock(_entry("termcolor", "1.1.0", [], sdist="termcolor-1.1.0.tar.gz"))
    (pkg,) = packages_from_pylock(text, _target("win-64", "3.8", None))
    assert pkg.filename == "termcolor-1.1.0.tar.gz"
    assert pkg.sha256 == "a" * 64


def test_windows_target_takes_win_amd64_and_python_tag() -> None:
    text = _pylock(
        _entry(
            "wrapt",
            "1.14.1",
            [
                "wrapt-1.14.1-cp37-cp37m-win_amd64.whl",
                "wrapt-1.14.1-cp38-cp38-win_amd64.whl",
                "wrapt-1.14.1-cp37-cp37m-manylinux1_x86_64.whl",
            ],
        )
    )
    (pkg,) = packages_from_pylock(text, _target("win-64", "3.7", None))
    assert pkg.filename == "wrapt-1.14.1-cp37-cp37m-win_amd64.whl"
