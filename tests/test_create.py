"""create: hash checks (file:// included), staging + move into place, --force, pip wheels; and
the acceptance run end to end through the console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.catalog.loader import load_catalog
from envfactory.errors import ToolError, UserInputError
from envfactory.install.create import create_environment
from envfactory.install.verify import verify_environment
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, lock_combo
from envfactory.solve.lockreview import check_lock

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
CONDA_LOCK = str(Path(sys.executable).parent / "conda-lock")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENVFACTORY, *args], cwd=cwd, capture_output=True, text=True, timeout=180)


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".envfactory-" in p.name)


def test_create_linux_env_with_conda_and_pip(tf114_lock: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "envs" / "tf114"
    messages: list[str] = []
    result = create_environment(tf114_lock, prefix, platform="linux-64", progress=messages.append)
    assert (result.conda, result.pip) == (6, 23)  # with importlib-metadata, zipp, typing-ext.
    assert (prefix / "lib/libcudnn.so.7.6.5").read_text() == "stub cudnn for CUDA 10.0\n"
    site = prefix / "lib/python3.7/site-packages"
    assert (site / "tensorflow_gpu-1.14.0.dist-info").is_dir()
    assert not list(site.glob("numpy-*.dist-info"))  # numpy is conda's
    assert any("linking 6 conda packages" in m for m in messages)
    assert leftovers(prefix.parent) == []
    assert verify_environment(prefix).identical


def test_create_win_layout(tf114_lock: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "win"
    create_environment(tf114_lock, prefix, platform="win-64")
    assert (prefix / "python.exe").is_file()
    assert (prefix / "Lib/site-packages/tensorflow_gpu-1.14.0.dist-info").is_dir()
    assert verify_environment(prefix).identical


def test_a_tampered_package_fails_and_leaves_nothing(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    channel = tmp_path / "channel"
    shutil.copytree(test_channels["defaults"], channel)
    req = LockRequest.for_combo(
        load_catalog().combo("tf114-cuda100"),
        platforms=["linux-64"],
        channel_map=ChannelMap({"defaults": channel.as_uri()}),
        pip_index=str(test_channels["wheels"]),
    )
    lock_combo(req, tmp_path / "lock")
    # Same file name, other bytes: what a compromised or corrupted mirror serves.
    victim = channel / "linux-64" / "cudnn-7.6.5-cuda10.0_0.tar.bz2"
    victim.write_bytes(victim.read_bytes()[:-1] + b"\0")
    prefix = tmp_path / "envs" / "broken"
    # a cache of its own: the session's may hold the genuine archive's entry already (entries
    # are found by the lock's sha256), and then the mirror's file is rightly never read
    from envfactory.cache.pkgcache import CacheLocation, PackageCache

    cache = PackageCache(CacheLocation(tmp_path / "cache"))
    with pytest.raises(ToolError) as info:
        create_environment(
            tmp_path / "lock" / "conda-lock.yml", prefix, platform="linux-64", cache=cache
        )
    assert "cudnn 7.6.5 cuda10.0_0" in info.value.message
    assert "sha256" in info.value.message
    assert not prefix.exists()
    assert leftovers(prefix.parent) == []


def test_existing_prefix_needs_force(tf114_lock: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "taken"
    create_environment(tf114_lock, prefix, platform="linux-64")
    (prefix / "keep.txt").write_text("mine")
    with pytest.raises(UserInputError, match="not empty") as info:
        create_environment(tf114_lock, prefix, platform="linux-64")
    assert info.value.hint and "--force" in info.value.hint
    assert (prefix / "keep.txt").read_text() == "mine"
    messages: list[str] = []
    result = create_environment(
        tf114_lock, prefix, force=True, platform="linux-64", progress=messages.append
    )
    assert result.replaced == prefix
    assert any(f"--force: the conda environment {prefix}" in m for m in messages)
    assert not (prefix / "keep.txt").exists()
    assert verify_environment(prefix).identical
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_acceptance_end_to_end(test_channels: dict[str, Path], tmp_path: Path) -> None:
    """render -> lock (linux-64, win-64) -> conda-lock render reads it -> create linux-64 ->
    verify identical -> lock again gives the same bytes -> --check fresh, stale after a pin
    changes."""
    mapping = ["--channel-map", f"defaults={test_channels['defaults']}"]
    pip = ["--pip-index", str(test_channels["wheels"])]
    rendered = run("render", "tf114-cuda100", cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    locked = run("lock", "tf114-cuda100", *mapping, *pip, cwd=tmp_path)
    assert locked.returncode == 0, locked.stderr
    lock = tmp_path / "locks/tf114-cuda100/conda-lock.yml"
    before = {p: p.read_bytes() for p in lock.parent.rglob("*") if p.is_file()}

    explicit = subprocess.run(
        [CONDA_LOCK, "render", "-k", "explicit", "-p", "linux-64", "--filename-template",
         str(tmp_path / "x-{platform}.lock"), str(lock)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert explicit.returncode == 0, explicit.stderr
    assert "@EXPLICIT" in (tmp_path / "x-linux-64.lock").read_text()

    created = run("create", "tf114-cuda100", "-p", str(tmp_path / "env"), cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    assert "6 conda + 23 pip packages" in created.stdout
    verified = run("verify", str(tmp_path / "env"), cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout
    assert "is identical" in verified.stdout

    again = run("lock", "tf114-cuda100", *mapping, *pip, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert {p: p.read_bytes() for p in lock.parent.rglob("*") if p.is_file()} == before

    fresh = run("lock", "tf114-cuda100", *mapping, *pip, "--check", cwd=tmp_path)
    assert fresh.returncode == 0 and "up to date" in fresh.stdout
    # A pin change: the same request over an edited catalog (the shipped one is read-only here).
    import dataclasses

    import envfactory as package
    from envfactory.catalog.loader import load_catalog_from

    data = tmp_path / "catalog"
    shutil.copytree(Path(package.__file__).parent / "data", data)
    combos = data / "combos.yaml"
    text = combos.read_text()
    combos.write_text(text.replace('"scikit-image=0.16.2"', '"scikit-image=0.16.1"'))
    req = LockRequest.for_combo(
        load_catalog().combo("tf114-cuda100"),
        channel_map=ChannelMap({"defaults": test_channels["defaults"].resolve().as_uri()}),
        pip_index=str(test_channels["wheels"]),
    )
    assert check_lock(req, lock.parent).fresh
    edited = dataclasses.replace(req, combo=load_catalog_from(data).combo("tf114-cuda100"))
    stale = check_lock(edited, lock.parent)
    assert not stale.fresh and any("scikit-image=0.16.1" in r for r in stale.reasons)


def test_create_refuses_a_lock_without_the_platform(tmp_path: Path, tf114_lock: Path) -> None:
    text = tf114_lock.read_text()
    assert "win-64" in text
    proc = run("create", str(tf114_lock), "-p", str(tmp_path / "e"), "-n", "x", cwd=tmp_path)
    assert proc.returncode == 1 and "exactly one of" in proc.stderr
