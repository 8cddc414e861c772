"""Shared setups: locks and environments made by envfactory's own functions against the
session's test channels (conftest.py's ``test_channels``), so that test files do not copy them.

``channels`` below is that fixture's mapping: channel name -> directory, and ``"wheels"`` -> the
folder of wheels the pip side locks against.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from envfactory.activation.plan import CORE_RELPATH, plan_for, plan_relpath, script_relpath
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import Platform
from envfactory.install.create import create_environment
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, lock_combo

SOURCES = ("defaults", "conda-forge")  # created_env's channels
ENVFACTORY = str(Path(sys.executable).parent / "envfactory")  # the CLI of this checkout's venv

# The fuzz tests' settings: 150 derandomized examples per test (the same ones every run);
# ENVFACTORY_FUZZ_EXAMPLES=N runs N random ones instead, for a longer hunt.
_LONG = int(os.environ.get("ENVFACTORY_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_LONG or 150,
    deadline=None,
    derandomize=not _LONG,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def lock_request(
    channels: Mapping[str, Path],
    combo: str,
    *,
    platforms: Sequence[Platform] = (),
    sources: Sequence[str] = ("defaults",),
) -> LockRequest:
    """The lock request for catalog combo ``combo`` against the test channels named in
    ``sources`` (each under its own name) and the test wheels; every platform by default."""
    return LockRequest.for_combo(
        load_catalog().combo(combo),
        platforms=platforms,
        channel_map=ChannelMap({name: channels[name].as_uri() for name in sources}),
        pip_index=str(channels["wheels"]),
    )


def lock_file(
    channels: Mapping[str, Path],
    combo: str,
    directory: Path,
    *,
    platforms: Sequence[Platform] = (),
    sources: Sequence[str] = ("defaults",),
) -> Path:
    """``combo`` locked into ``directory`` (``lock_request``'s arguments); its conda-lock.yml."""
    lock_combo(lock_request(channels, combo, platforms=platforms, sources=sources), directory)
    return directory / "conda-lock.yml"


def created_env(channels: Mapping[str, Path], combo: str, platform: Platform, root: Path) -> Path:
    """``combo`` locked for ``platform`` against defaults and conda-forge into root/locks/ and
    created at ``root/envs/<combo> env`` (a prefix with a space, as under a user's "My
    Projects"); fails the test unless create installed every activation script of its plan."""
    lock = lock_file(
        channels, combo, root / "locks" / combo, platforms=(platform,), sources=SOURCES
    )
    prefix = root / "envs" / f"{combo} env"
    create_environment(lock, prefix, platform=platform)
    shells = plan_for(load_catalog().combo(combo), platform).shells
    expected = [CORE_RELPATH, plan_relpath(combo)] + [
        script_relpath(combo, phase, shell)
        for phase in ("activate", "deactivate")
        for shell in shells
    ]
    missing = [path for path in expected if not (prefix / path).is_file()]
    if missing:
        pytest.fail(f"create did not install the activation scripts into {prefix}: {missing}")
    return prefix


def cli_flags(channels: Mapping[str, Path]) -> list[str]:
    """The `envfactory lock` options that point it at the test channel and wheels."""
    return [
        "--channel-map",
        f"defaults={channels['defaults']}",
        "--pip-index",
        str(channels["wheels"]),
    ]


def created_project(channels: Mapping[str, Path], root: Path, manifest: str, env: str) -> Path:
    """A project in ``root`` (``manifest`` as its envfactory.yaml) locked and its environment
    ``env`` created, by the envfactory command as a user types it; the environment's prefix."""
    (root / "envfactory.yaml").write_text(manifest)
    for args in (["lock", *cli_flags(channels)], ["create", env]):
        proc = subprocess.run(
            [ENVFACTORY, *args], cwd=root, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
    return root / "envs" / env


def paths_of(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a node of the parsed YAML ``doc`` (keys and indices): where fuzzers edit."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += paths_of(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out += paths_of(value, (*prefix, index))
    return out
