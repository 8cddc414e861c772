"""Every combo with a pip route, on every platform it covers, locked against the real package
index (network): the conda side from a local channel that holds exactly the combo's pins (stub
payloads), the pip side resolved by uv from pypi.org for the target Python and platform.

Asserted for each lock: it succeeds (the post-solve checks included, so no companion constraint
is broken), every companion constraint holds for every locked package (checked here again,
independently of the lock's own check), and the lock is complete: resolving the lock's own pip
pins again for the target Python adds nothing and changes nothing. Resolution only: uv reads
wheel metadata with range requests; no wheel is downloaded.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from channel_builder import StubPackage, build_channel
from packaging.specifiers import SpecifierSet

from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import Combo, Platform
from envfactory.lockfile.models import LockedPackage
from envfactory.render.environment import environment_spec
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, lock_combo
from envfactory.solve.pypi import PipTarget, lock_target

PIP_ROUTES = ("conda-cuda+pip", "pip-and-cuda")


def pip_route_cases() -> list[tuple[str, Platform]]:
    return [
        (combo.name, platform)
        for combo in load_catalog()
        for platform, route in combo.platforms.items()
        if route.route.value in PIP_ROUTES
    ]


def pins_channel(root: Path, combo: Combo, platform: Platform) -> ChannelMap:
    """A local channel of the combo's own conda pins for ``platform`` (plus python and pip), all
    channel names of the route pointing at it."""
    spec = environment_spec(combo, platform)
    stubs = [
        StubPackage("python", spec.python, "envf_pin_0", platform),
        StubPackage("pip", "23.2.1", "envf_pin_0", platform),
    ]
    stubs += [
        StubPackage(pin.name, pin.version, pin.build or "envf_pin_0", platform)
        for pin in spec.conda
    ]
    channel = build_channel(root / f"{combo.name}-{platform}", stubs)
    return ChannelMap({name: channel.as_uri() for name in combo.route(platform).channels})


CASES = pip_route_cases()


@dataclass(frozen=True)
class Outcome:
    request: LockRequest
    packages: tuple[LockedPackage, ...]
    again: tuple[LockedPackage, ...]


def lock_and_relock(root: Path, name: str, platform: Platform) -> Outcome:
    combo = load_catalog().combo(name)
    request = LockRequest.for_combo(
        combo, platforms=(platform,), channel_map=pins_channel(root, combo, platform)
    )
    packages = lock_combo(request, root / f"lock-{name}-{platform}").packages[platform]
    pip = [p for p in packages if p.manager == "pip"]
    again = lock_target(
        PipTarget(
            requirements=tuple(f"{p.name}=={p.version}" for p in pip),
            platform=platform,
            python=request.python,
            glibc=request.inputs[platform].virtual_packages.get("__glibc"),
            conda_packages=tuple(p for p in packages if p.manager == "conda"),
            constraints=combo.constraints_for(platform),
        )
    )
    return Outcome(request, packages, tuple(again))


@pytest.fixture(scope="module")
def real_locks(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], object]:
    """Every case locked, eight at a time: each lock waits on the network (uv), not the CPU.
    The first runs alone, so conda-lock is imported before the threads use it."""
    root = tmp_path_factory.mktemp("realindex")

    def run(case: tuple[str, Platform]) -> object:
        try:
            return lock_and_relock(root, *case)
        except Exception as exc:  # reported by the case's own test
            return exc

    first = run(CASES[0])  # imports conda_lock and warms uv's cache in this thread
    with ThreadPoolExecutor(max_workers=8) as pool:
        rest = list(pool.map(run, CASES[1:]))
    return dict(zip(CASES, [first, *rest], strict=True))


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.parametrize(("name", "platform"), CASES)
def test_pip_route_locks_against_the_real_index(
    name: str, platform: Platform, real_locks: dict[tuple[str, str], object]
) -> None:
    outcome = real_locks[(name, platform)]
    if isinstance(outcome, Exception):
        raise outcome
    assert isinstance(outcome, Outcome)
    combo = load_catalog().combo(name)
    packages = outcome.packages
    pip = [p for p in packages if p.manager == "pip"]
    assert pip, "a pip route locks pip packages"
    assert all(p.url.startswith("https://files.pythonhosted.org/") for p in pip)
    assert all(len(p.sha256 or "") == 64 for p in pip)
    for constraint in combo.constraints_for(platform):
        for pkg in packages:
            if pkg.name in constraint.names():
                assert SpecifierSet(constraint.spec).contains(pkg.version), (pkg, constraint)
    # complete for the target python: the lock's own pins resolve to themselves, nothing added
    assert {(p.name, p.version, p.url) for p in outcome.again} == {
        (p.name, p.version, p.url) for p in pip
    }
