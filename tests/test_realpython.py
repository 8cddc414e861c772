"""The pip half end to end on a real interpreter (issue 26, the done-when line): tf215-cuda122's
conda side (python 3.11, pip) from a local channel whose python is a real CPython 3.11
(tests/realpython.py), the pip side from the real index (PyPI), created, then activated with
conda's own activator: ``tensorboard --version`` runs, ``python -m pip check`` passes.

The pip side is NOT the combo's own ``tensorflow[and-cuda]==2.15.0.post1`` (the tensorflow wheel
alone is 475 MB, the NVIDIA wheels it pulls some GB more): the lock's request keeps the combo,
its python, channels, virtual packages and companion constraints (numpy <2) and asks the pip
side for ``tensorboard==2.15.2``, the tensorboard TF 2.15 requires (``tensorboard>=2.15,<2.16``),
with its real closure from PyPI (numpy, grpcio, protobuf, werkzeug, ...: ~40 MB). The wheels and
the python package are kept in pytest's cache (``.pytest_cache/d/realpython``) across runs, so
only the first run downloads them."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.cache.pkgcache import CacheLocation, PackageCache
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import PipPin
from envfactory.install.create import create_environment
from envfactory.install.verify import verify_environment
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, lock_combo

pytestmark = [pytest.mark.network, pytest.mark.slow]
ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
CONDA_REAL = Path(__file__).parent / "shells" / "conda_real.py"
TENSORBOARD = "tensorboard==2.15.2"


@pytest.fixture(scope="module")
def cache_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = request.config.cache
    return Path(cache.mkdir("realpython")) if cache else tmp_path_factory.mktemp("realpython")


@pytest.fixture(scope="module")
def real_lock(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from realpython import NoInterpreter, build_real_channel

    root = tmp_path_factory.mktemp("realpython")
    try:
        channel, _source = build_real_channel(cache_dir)
    except NoInterpreter as err:
        pytest.fail(f"error: {err}", pytrace=False)
    combo = load_catalog().combo("tf215-cuda122")
    request = LockRequest.for_combo(
        combo, channel_map=ChannelMap({"conda-forge": channel.as_uri()})
    )
    pin = PipPin(TENSORBOARD, ("pypi-tensorflow",), True, "the tensorboard TF 2.15 requires")
    specs = {p: dataclasses.replace(s, pip=(pin,)) for p, s in request.specs.items()}
    request = dataclasses.replace(request, specs=specs)
    lock_combo(request, root / "lock")
    return root / "lock" / "conda-lock.yml"


def _activated(prefix: Path, command: str) -> subprocess.CompletedProcess[str]:
    """``command`` in bash after conda's own activator activated ``prefix``."""
    script = (
        f'eval "$({sys.executable} {CONDA_REAL} posix activate {prefix})" && '
        f'echo "PYTHON=$(command -v python)" && {command}'
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_tensorboard_runs_and_pip_check_passes_after_activation(
    real_lock: Path, cache_dir: Path, tmp_path: Path
) -> None:
    text = real_lock.read_text()
    assert "https://files.pythonhosted.org/packages/" in text  # the real index's files
    cache = PackageCache(CacheLocation(cache_dir / "pkgs"))
    prefix = tmp_path / "envs" / "tf215"
    first = create_environment(real_lock, prefix, platform="linux-64", cache=cache)
    assert first.pip >= 15  # tensorboard's closure, minus what conda provides
    site = prefix / "lib/python3.11/site-packages"
    assert not list(site.rglob("*.pyc"))  # create ran no python of the environment
    run = _activated(
        prefix, "tensorboard --version && python -m pip check && python -m pip list --format freeze"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"PYTHON={prefix}/bin/python"  # the environment's own, first on PATH
    assert lines[1] == "2.15.2"  # tensorboard --version, through its console script in bin/
    assert lines[2] == "No broken requirements found."  # pip check
    assert {"tensorboard==2.15.2", "pip==24.0", "setuptools==69.5.1"} <= set(lines[3:])
    shebang = (prefix / "bin/tensorboard").read_text().splitlines()[0]
    assert shebang == f"#!{prefix}/bin/python"
    assert verify_environment(prefix).identical
    # a second create downloads nothing: every wheel comes from the package cache
    second = create_environment(real_lock, tmp_path / "envs" / "again", platform="linux-64",
                                cache=cache)  # fmt: skip
    assert (second.pip_downloaded, second.pip_cached) == (0, first.pip)


@pytest.mark.skipif(not shutil.which("unshare"), reason="unshare switches the network off")
def test_mirror_of_the_real_lock_then_create_with_the_network_off(
    real_lock: Path, cache_dir: Path, tmp_path: Path
) -> None:
    """The mirror takes every file from the package cache the first test filled (no download
    again) and writes the pip side as a PEP 503 index; create from it alone, offline."""
    from envfactory.install.mirror import mirror_lock

    result = mirror_lock(
        real_lock, tmp_path / "mirror", cache=PackageCache(CacheLocation(cache_dir / "pkgs"))
    )
    assert (tmp_path / "mirror/pypi/simple/tensorboard/index.html").is_file()
    command = result.create_command(str(real_lock)).split()[3:]
    flags = [a for a in command if a != "--pip-index" and "/pypi/simple" not in a]
    prefix = tmp_path / "env"
    env = {**os.environ, "ENVFACTORY_PKGS_DIRS": str(tmp_path / "empty-cache")}
    proc = subprocess.run(
        ["unshare", "-rn", ENVFACTORY, "create", str(real_lock), *flags, "-p", str(prefix)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes downloaded" in proc.stdout
    assert verify_environment(prefix).identical
    assert (prefix / "bin/tensorboard").read_text().startswith(f"#!{prefix}/bin/python\n")
