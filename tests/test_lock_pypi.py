"""The pip side of a lock against the real PyPI (network): exact wheels with sha256 for the
target platform and Python, not this machine's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfactory.build.checks import LockedPackage
from envfactory.build.pypi import lock_requirements

DATA = Path(__file__).parent / "data" / "pypi"


@pytest.mark.network
@pytest.mark.slow
def test_tf114_wheel_for_py37_linux_from_pypi() -> None:
    numpy = LockedPackage(
        manager="conda", name="numpy", version="1.16.4", platform="linux-64", url="x"
    )
    wheels = {
        p.name: p
        for p in lock_requirements(
            ["tensorflow-gpu==1.14.0"], "linux-64", "3.7", "2.17", [numpy], index=None
        )
    }
    tf = wheels["tensorflow-gpu"]
    assert tf.url.startswith("https://files.pythonhosted.org/")
    assert tf.filename == "tensorflow_gpu-1.14.0-cp37-cp37m-manylinux1_x86_64.whl"
    assert len(tf.sha256 or "") == 64
    assert "numpy" not in wheels
    captured = json.loads((DATA / "tf114-cuda100-linux-64.json").read_text())
    names = {w["filename"] for w in captured["wheels"] if w["name"] != "numpy"}
    assert {p.filename for p in wheels.values()} == names
