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
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from envfactory.cache.pkgcache import CacheLocation, PackageCache
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.platforms import Platform
from envfactory.install.mirror import MirrorResult, mirror_lock
from envfactory.install.verify import verify_environment
from envfactory.lockfile.models import LockedPackage
from envfactory.lockfile.read import read_lock
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, lock_combo

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


# --- every other combo of the catalog ------------------------------------------------------------
# The channels of tests/channel_builder.py's ``catalog_packages`` (each pinned package of the
# catalog, as the catalog names it, with tiny payloads) and, for a route with a pip side, a wheel
# folder built from its real PyPI metadata (tests/data/pypi/catalog/, capture_reports.py): every
# combo and platform that LOCKABLE does not already cover is locked, mirrored and created from
# its mirror with the network off. One ``unshare -rn`` shell runs all the creates, one after
# the other (a namespace and a shell each would cost more than the creates themselves).

CATALOG_PAIRS: list[tuple[str, Platform]] = [
    (combo.name, platform)
    for combo in load_catalog().combos.values()
    for platform in combo.platforms
    if (combo.name, platform) not in LOCKABLE
]


@dataclass
class Mirrored:
    lock: Path
    packages: list[LockedPackage]
    result: MirrorResult | None = None
    error: str = ""
    create_rc: int | None = None
    create_out: str = ""
    create_err: str = ""


@pytest.fixture(scope="module")
def catalog_mirrors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Mirrored]:
    """Each pair locked and mirrored in this process, then all created in one offline shell."""
    from channel_builder import PIP_REPORTS, build_channel, build_wheel_folder, catalog_packages

    root = tmp_path_factory.mktemp("catalog")
    channels = ChannelMap(
        {name: build_channel(root / "channels" / name, packages).as_uri()
         for name, packages in catalog_packages().items()}
    )  # fmt: skip
    cache = PackageCache(CacheLocation(root / "mirror-cache"))
    out: dict[str, Mirrored] = {}
    script = ["set -u"]
    for combo_name, platform in CATALOG_PAIRS:
        key = f"{combo_name}-{platform}"
        combo = load_catalog().combo(combo_name)
        report = PIP_REPORTS / f"{key}.json"
        lock = root / "locks" / key / "conda-lock.yml"
        item = out[key] = Mirrored(lock, [])
        try:
            has_pip = bool(combo.route(platform).pip)
            wheels = build_wheel_folder(root / "wheels" / key, [report]) if has_pip else None
            request = LockRequest.for_combo(
                combo, platforms=(platform,), channel_map=channels,
                pip_index=str(wheels) if wheels else None,
            )  # fmt: skip
            lock_combo(request, lock.parent)
            item.packages = [p for p in read_lock(lock).packages if p.platform == platform]
            item.result = mirror_lock(lock, root / "mirrors" / key, cache=cache)
        except Exception as err:  # reported by the pair's own test
            item.error = f"{type(err).__name__}: {err}"
            continue
        flags = [
            a for a in item.result.create_command(str(lock)).split()[3:]
            if a != "--pip-index" and "/pypi/simple" not in a
        ]  # fmt: skip
        prefix, logs = root / "envs" / key, root / "logs" / key
        logs.mkdir(parents=True)
        command = [ENVFACTORY, "create", str(lock), *flags, "--platform", platform,
                   "-p", str(prefix)]  # fmt: skip
        script.append(f"{shlex.join(command)} >{logs}/out 2>{logs}/err; echo $? >{logs}/rc")
    env = {**os.environ, "ENVFACTORY_PKGS_DIRS": str(root / "empty-cache")}
    subprocess.run(
        ["unshare", "-rn", "sh", "-c", "\n".join(script)],
        env=env, timeout=900, check=True,
    )  # fmt: skip
    for key, item in out.items():
        logs = root / "logs" / key
        if item.error:
            continue
        item.create_rc = int((logs / "rc").read_text())
        item.create_out = (logs / "out").read_text()
        item.create_err = (logs / "err").read_text()
    return out


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("unshare"), reason="unshare switches the network off")
@pytest.mark.parametrize(("combo", "platform"), CATALOG_PAIRS)
def test_every_catalog_combo_mirrors_and_creates_offline(
    combo: str, platform: Platform, catalog_mirrors: dict[str, Mirrored], tmp_path: Path
) -> None:
    item = catalog_mirrors[f"{combo}-{platform}"]
    assert not item.error, item.error
    assert item.result is not None
    assert len(item.result.outcomes) == len({p.url for p in item.packages})
    pip = [p for p in item.packages if p.manager == "pip"]
    assert bool(pip) == bool(load_catalog().combo(combo).route(platform).pip)
    assert item.result.has_wheels == bool(pip)
    assert item.create_rc == 0, item.create_err
    if pip:
        assert "0 bytes downloaded" in item.create_out
    prefix = item.lock.parent.parent.parent / "envs" / f"{combo}-{platform}"
    report = verify_environment(prefix)
    assert report.identical, report
