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

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
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
    platform: Platform
    prefix: Path
    packages: list[LockedPackage] = field(default_factory=list)
    result: MirrorResult | None = None
    error: str = ""
    create_rc: int | None = None
    create_out: str = ""
    create_err: str = ""


def _create_offline(items: dict[str, Mirrored], root: Path) -> None:
    """``envfactory create`` of each mirrored lock, its flags from the mirror's own command,
    all in one ``unshare -rn`` shell (no network device), each with an empty package cache of
    its own: nothing can come from anywhere but the pair's mirror."""
    script = ["set -u"]
    for key, item in items.items():
        if item.error or item.result is None:
            continue
        flags = [
            a for a in item.result.create_command(str(item.lock)).split()[3:]
            if a != "--pip-index" and "/pypi/simple" not in a
        ]  # the mirror's marker leads create to its pip index  # fmt: skip
        logs = root / "logs" / key
        logs.mkdir(parents=True)
        command = [ENVFACTORY, "create", str(item.lock), *flags, "--platform", item.platform,
                   "-p", str(item.prefix)]  # fmt: skip
        script.append(
            f"ENVFACTORY_PKGS_DIRS={shlex.quote(str(root / 'caches' / key))} "
            f"{shlex.join(command)} >{logs}/out 2>{logs}/err; echo $? >{logs}/rc"
        )
    subprocess.run(["unshare", "-rn", "sh", "-c", "\n".join(script)], timeout=900, check=True)
    for key, item in items.items():
        logs = root / "logs" / key
        if (logs / "rc").exists():
            item.create_rc = int((logs / "rc").read_text())
            item.create_out = (logs / "out").read_text()
            item.create_err = (logs / "err").read_text()


def _mirror(item: Mirrored, folder: Path, cache: PackageCache) -> None:
    """Read the pair's lock and mirror it into ``folder``; an error is kept for its own test."""
    try:
        item.packages = [p for p in read_lock(item.lock).packages if p.platform == item.platform]
        item.result = mirror_lock(item.lock, folder, cache=cache)
    except Exception as err:  # reported by the pair's own test
        item.error = f"{type(err).__name__}: {err}"


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
    for combo_name, platform in CATALOG_PAIRS:
        key = f"{combo_name}-{platform}"
        combo = load_catalog().combo(combo_name)
        lock = root / "locks" / key / "conda-lock.yml"
        item = out[key] = Mirrored(lock, platform, root / "envs" / key)
        try:
            report = PIP_REPORTS / f"{key}.json"
            has_pip = bool(combo.route(platform).pip)
            wheels = build_wheel_folder(root / "wheels" / key, [report]) if has_pip else None
            request = LockRequest.for_combo(
                combo, platforms=(platform,), channel_map=channels,
                pip_index=str(wheels) if wheels else None,
            )  # fmt: skip
            lock_combo(request, lock.parent)
        except Exception as err:  # reported by the pair's own test
            item.error = f"{type(err).__name__}: {err}"
            continue
        _mirror(item, root / "mirrors" / key, cache)
    _create_offline(out, root)
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
    report = verify_environment(item.prefix)
    assert report.identical, report


# --- the same locks with their real sdists -------------------------------------------------------
# The pairs above install a pure-Python stand-in wheel in place of each sdist-only release of
# their pip closure (channel_builder.build_wheel_folder). Here each such stand-in is replaced in
# the lock by the real sdist its report captured (PyPI's URL and sha256): mirror carries it with
# the pinned build backend, and create builds it from the mirror with the network off (wrapt
# 1.12.1 of TF 2.4 - 2.6, which has C sources, with its own pure-Python switch).


def _sdists(pair: tuple[str, Platform]) -> list[dict[str, str]]:
    from channel_builder import PIP_REPORTS

    report = PIP_REPORTS / f"{pair[0]}-{pair[1]}.json"
    if not report.exists():
        return []
    wheels = json.loads(report.read_text(encoding="utf-8"))["wheels"]
    return [w for w in wheels if not w["filename"].endswith(".whl")]


SDIST_PAIRS = [pair for pair in CATALOG_PAIRS if _sdists(pair)]


@pytest.fixture(scope="module")
def sdist_mirrors(
    catalog_mirrors: dict[str, Mirrored],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Mirrored]:
    """The real sdists (and the build backend) are downloaded once into pytest's cache
    (network), which the mirror copies from; each lock of SDIST_PAIRS rewritten to them."""
    from envfactory.cache.pipcache import PipCache
    from envfactory.install.sdistbuild import backend_package

    keep = request.config.cache
    folder = Path(keep.mkdir("catalog-sdists")) if keep else tmp_path_factory.mktemp("sdists")
    root = tmp_path_factory.mktemp("catalog-sdists")
    real = {
        (s["name"], s["version"]): s for pair in SDIST_PAIRS for s in _sdists(pair)
    }  # fmt: skip
    saved = PipCache(folder)
    for s in real.values():
        saved.fetch(LockedPackage("pip", s["name"], s["version"], "linux-64", s["url"],
                                  sha256=s["sha256"]))  # fmt: skip
    saved.fetch(backend_package("linux-64"))
    shutil.copytree(folder / ".pypi", root / "cache" / ".pypi",
                    ignore=shutil.ignore_patterns(".tmp-*"))  # fmt: skip
    cache = PackageCache(CacheLocation(root / "cache"))
    out: dict[str, Mirrored] = {}
    for combo, platform in SDIST_PAIRS:
        key = f"{combo}-{platform}"
        source = catalog_mirrors[key]
        lock = root / "locks" / key / "conda-lock.yml"
        item = out[key] = Mirrored(lock, platform, root / "envs" / key)
        if source.error:
            item.error = source.error
            continue
        text = source.lock.read_text(encoding="utf-8")
        for s in _sdists((combo, platform)):
            stand_in = next(p for p in source.packages if p.name == s["name"].lower())
            assert stand_in.sha256
            text = text.replace(stand_in.url, s["url"]).replace(stand_in.sha256, s["sha256"])
        lock.parent.mkdir(parents=True)
        lock.write_text(text, encoding="utf-8")
        _mirror(item, root / "mirrors" / key, cache)
    _create_offline(out, root)
    return out


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("unshare"), reason="unshare switches the network off")
@pytest.mark.parametrize(("combo", "platform"), SDIST_PAIRS)
def test_catalog_combos_with_real_sdists_mirror_and_create_offline(
    combo: str, platform: Platform, sdist_mirrors: dict[str, Mirrored]
) -> None:
    item = sdist_mirrors[f"{combo}-{platform}"]
    assert not item.error, item.error
    assert item.result is not None
    sdists = _sdists((combo, platform))
    files = item.result.directory / "pypi" / "files"
    for s in sdists:
        assert (files / s["filename"]).is_file()  # the sdist itself, under the PEP 503 index
    assert (files / "setuptools-75.8.0-py3-none-any.whl").is_file()  # its build backend
    assert item.create_rc == 0, item.create_err
    assert "0 bytes downloaded" in item.create_out
    built = ", ".join(sorted(f"{s['name']} {s['version']}" for s in sdists))
    assert f"built from sdists: {built}" in item.create_out
    report = verify_environment(item.prefix)
    assert report.identical, report
