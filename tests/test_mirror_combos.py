"""``mirror`` of every combo's lock that the test channels can solve, then ``create`` from the
mirror alone with the network off (issue 26: "mirror of every combo's lock succeeds; create from
that mirror with the network off works").

Which combos: each catalog combo and platform was locked against the test channels
(tests/channel_builder.py: ``defaults`` with tf114's real-metadata packages, ``conda-forge`` with
the pangeo TF 2.10 lock's records and tf23's win-64 packages, the wheel folder of the captured
pip reports) on 2026-12-03; these five lock, every other one has no solution there (their
packages are not in our data). tf215-cuda122 (python 3.11) is covered by
tests/test_realpython.py against its own channel. Locks of the other combos need the real
channels, which this machine cannot reach.

The create runs as the CLI in a network namespace of its own (``unshare -rn``: loopback only),
with an empty package cache, the mirror's channel map and, where the lock has pip files, the
mirror's PEP 503 index found through its marker."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.cache.pkgcache import CacheLocation, PackageCache
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.platforms import Platform
from envfactory.install.mirror import mirror_lock
from envfactory.install.verify import verify_environment
from envfactory.lockfile.read import read_lock
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, lock_combo

pytestmark = pytest.mark.slow  # a lock, a mirror and a create for each combo

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
LOCKABLE: list[tuple[str, Platform]] = [
    ("tf114-cuda100", "linux-64"),
    ("tf114-cuda100", "win-64"),
    ("tf114-cuda101", "linux-64"),
    ("tf210-cuda112", "linux-64"),
    ("tf23-cuda101", "win-64"),
]


@pytest.mark.skipif(not shutil.which("unshare"), reason="unshare switches the network off")
@pytest.mark.parametrize(("combo", "platform"), LOCKABLE)
def test_mirror_then_create_with_the_network_off(
    combo: str, platform: Platform, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    request = LockRequest.for_combo(
        load_catalog().combo(combo),
        platforms=(platform,),
        channel_map=ChannelMap(
            {name: test_channels[name].as_uri() for name in ("defaults", "conda-forge")}
        ),
        pip_index=str(test_channels["wheels"]),
    )
    lock_combo(request, tmp_path / "lock")
    lock = tmp_path / "lock" / "conda-lock.yml"
    packages = [p for p in read_lock(lock).packages if p.platform == platform]
    result = mirror_lock(
        lock, tmp_path / "mirror", cache=PackageCache(CacheLocation(tmp_path / "mirror-cache"))
    )
    assert len(result.outcomes) == len({p.url for p in packages})  # noarch files: once
    command = result.create_command(str(lock)).split()[3:]  # after "envfactory create LOCK"
    flags = [a for a in command if a != "--pip-index" and "/pypi/simple" not in a]
    prefix = tmp_path / "env"
    env = {**os.environ, "ENVFACTORY_PKGS_DIRS": str(tmp_path / "empty-cache")}
    proc = subprocess.run(
        ["unshare", "-rn", ENVFACTORY, "create", str(lock), *flags, "--platform", platform,
         "-p", str(prefix)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pip = [p for p in packages if p.manager == "pip"]
    if pip:
        assert "0 bytes downloaded" in proc.stdout
    report = verify_environment(prefix)
    assert report.identical, report
