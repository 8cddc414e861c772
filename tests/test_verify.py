"""verify: an environment's conda-meta records and pip dist-infos against its lock."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.catalog.loader import load_catalog
from envfactory.install.create import create_environment
from envfactory.install.verify import verify_environment
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, lock_combo

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")


@pytest.fixture(scope="module")
def env(test_channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify")
    req = LockRequest.for_combo(
        load_catalog().combo("tf114-cuda100"),
        platforms=["linux-64"],
        channel_map=ChannelMap({"defaults": test_channels["defaults"].as_uri()}),
        pip_index=str(test_channels["wheels"]),
    )
    lock_combo(req, root / "lock")
    create_environment(root / "lock" / "conda-lock.yml", root / "env", platform="linux-64")
    return root / "env"


@pytest.fixture
def copy(env: Path, tmp_path: Path) -> Path:
    target = tmp_path / "env"
    shutil.copytree(env, target, symlinks=True)
    return target


def test_identical(env: Path) -> None:
    report = verify_environment(env)
    assert report.identical and report.checked == 29


def test_missing_extra_and_different(copy: Path) -> None:
    meta = copy / "conda-meta"
    (meta / "cudnn-7.6.5-cuda10.0_0.json").unlink()
    numpy = meta / "numpy-1.16.4-py37h7e9f1db_0.json"
    record = json.loads(numpy.read_text())
    record["version"] = "1.17.0"
    numpy.write_text(json.dumps(record))
    (meta / "zlib-1.2.11-0.json").write_text(
        json.dumps({"name": "zlib", "version": "1.2.11", "build": "0"})
    )
    shutil.rmtree(copy / "lib/python3.7/site-packages/termcolor-2.3.0.dist-info")
    report = verify_environment(copy)
    assert [p.name for p in report.missing] == ["cudnn", "termcolor"]
    assert [p.name for p in report.extra] == ["zlib"]
    assert [(d.name, d.installed) for d in report.different] == [
        ("numpy", "numpy 1.17.0 py37h7e9f1db_0 (version differ)")
    ]
    proc = subprocess.run(
        [ENVFACTORY, "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3
    assert "missing    cudnn 7.6.5" in proc.stdout
    assert "extra      zlib 1.2.11 0" in proc.stdout


def test_explicit_lock_option_and_json(copy: Path, env: Path) -> None:
    marker = json.loads((env / "conda-meta/envfactory.json").read_text())
    (copy / "conda-meta/envfactory.json").unlink()
    proc = subprocess.run(
        [ENVFACTORY, "verify", str(copy), "--lock", marker["lock"], "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["identical"] is True
    bare = subprocess.run(
        [ENVFACTORY, "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert bare.returncode == 1 and "--lock" in bare.stderr


@pytest.mark.parametrize("text", ["{not json", "[]", '{"version": "1"}', "\udcff"])
def test_a_damaged_record_is_an_error_with_a_hint(copy: Path, text: str) -> None:
    record = copy / "conda-meta" / "zlib-1.2.11-0.json"
    if text == "\udcff":
        record.write_bytes(b"\xff\xfe{")
    else:
        record.write_text(text)
    proc = subprocess.run(
        [ENVFACTORY, "verify", str(copy)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    assert f"error: {record} is not a conda package record" in proc.stderr
    assert "hint: the environment is damaged" in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
