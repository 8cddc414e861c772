"""Real data: a channel rebuilt from a real conda-lock file (pangeo-data/pangeo-docker-images,
ml-notebook, TF 2.10.0 cuda112 on linux-64; tests/data/SOURCES.md), with every record's real
name, version, build, depends, md5 and sha256. Solving a TF 2.10.0 cuda112 spec against it must
give back the packages of TensorFlow's dependency closure in the real lock."""

from __future__ import annotations

from pathlib import Path

import pytest
from channel_builder import (
    PANGEO_LOCK,
    LockRecord,
    patched,
    read_lock_records,
    write_repodata_channel,
)

from envfactory.lockfile.models import LockedPackage, dependency_name
from envfactory.solve import rattler_adapter
from envfactory.solve.checks import closure_problems

VIRTUAL = {"__cuda": "11.2", "__glibc": "2.17", "__linux": "5.10", "__unix": "0"}


def closure(root: str, depends: dict[str, tuple[str, ...]]) -> set[str]:
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen or name not in depends:
            continue
        seen.add(name)
        todo += [dependency_name(d) for d in depends[name]]
    return seen


@pytest.fixture(scope="module")
def real() -> list[LockRecord]:
    return read_lock_records(PANGEO_LOCK, "linux-64")


def as_locked(records: list[LockRecord]) -> list[LockedPackage]:
    return [
        LockedPackage(
            manager="conda",
            name=r.name,
            version=r.version,
            platform="linux-64",
            url=f"https://conda.anaconda.org/conda-forge/{r.subdir}/{r.filename}",
            build=r.build,
            subdir=r.subdir,
            depends=r.depends,
        )
        for r in records
    ]


def test_the_real_lock_has_one_unsatisfied_dependency(real: list[LockRecord]) -> None:
    """What the closure check finds in the real file, and why the channel patches one pin."""
    problems = closure_problems(as_locked(real), rattler_adapter.matches)
    assert [(p.package, p.expected) for p in problems] == [
        ("ncurses", "'ncurses >=6.2,<6.3.0a0' (needed by libedit)")
    ]
    assert closure_problems(as_locked([patched(r) for r in real]), rattler_adapter.matches) == []


def test_tf210_cuda112_closure_matches_the_real_lock(
    real: list[LockRecord], tmp_path: Path
) -> None:
    assert len(real) == 663
    channel = write_repodata_channel(tmp_path / "conda-forge", [patched(r) for r in real])
    solved = rattler_adapter.solve(
        ["python=3.10", "tensorflow=2.10.0=cuda112*"], [channel.as_uri()], "linux-64", VIRTUAL
    )
    by_name = {r.name: r for r in real}
    want = closure("tensorflow", {r.name: r.depends for r in real})
    got = closure("tensorflow", {p.name: p.depends for p in solved})
    assert len(want) > 100
    assert got == want
    solved_by_name = {p.name: p for p in solved}
    for name in sorted(want):
        ours, theirs = solved_by_name[name], by_name[name]
        assert (ours.version, ours.build) == (theirs.version, theirs.build), name
        assert (ours.md5, ours.sha256) == (theirs.md5, theirs.sha256 or None), name
    assert solved_by_name["tensorflow-base"].build == "cuda112py310hf679b68_0"


def test_without_cuda_the_real_gpu_build_is_unsatisfiable(
    real: list[LockRecord], tmp_path: Path
) -> None:
    channel = write_repodata_channel(tmp_path / "conda-forge", [patched(r) for r in real])
    no_cuda = {k: v for k, v in VIRTUAL.items() if k != "__cuda"}
    with pytest.raises(rattler_adapter.Unsatisfiable) as info:
        rattler_adapter.solve(
            ["python=3.10", "tensorflow=2.10.0=cuda112*"], [channel.as_uri()], "linux-64", no_cuda
        )
    assert "__cuda" in info.value.explanation
