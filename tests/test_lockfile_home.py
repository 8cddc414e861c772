"""The lock format has one home (envfactory/lockfile/, issue 23): its constants are defined
once, envfactory's record is parsed once inside the read (callers get a ``LockFile`` whose
``metadata`` is a ``LockMetadata``), and a lock request's per-platform inputs are one frozen
value (``PlatformInputs``) whose ``record()`` is what the lock records and what ``--check``
compares."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from envfactory.catalog.loader import load_catalog
from envfactory.lockfile.models import LOCK_FILE, LockFile
from envfactory.lockfile.read import read_lock
from envfactory.lockfile.record import LockMetadata
from envfactory.solve.channels import ChannelMap
from envfactory.solve.inputs import inputs_hash
from envfactory.solve.lock import LockRequest, lock_combo
from envfactory.solve.lockreview import check_lock

PACKAGE = Path(__file__).resolve().parent.parent / "envfactory"
LOCKFILE_STAGE = PACKAGE / "lockfile"


def modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(PACKAGE.rglob("*.py"))]


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}"


def test_the_lock_constants_are_defined_once() -> None:
    """LOCK_FILE was defined in solve/lock.py, the conda-lock adapter and project/targets.py;
    LOCK_HINT in lockfile/read.py and lockfile/record.py."""
    found: dict[str, list[str]] = {"LOCK_FILE": [], "LOCK_HINT": []}
    for path, tree in modules():
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id in found:
                    found[target.id].append(where(path, node))
    for name, places in found.items():
        assert len(places) == 1, (name, places)
        assert places[0].startswith("envfactory/lockfile/models.py:"), (name, places)


def test_the_record_is_parsed_only_inside_the_lockfile_stage() -> None:
    """create, mirror and kernel parsed ``custom_metadata`` again after ``read_lock`` had parsed
    it; now they read ``LockFile.metadata``, and nothing outside lockfile/ sees the raw record."""
    outside = []
    for path, tree in modules():
        if path.is_relative_to(LOCKFILE_STAGE):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in (
                "custom_metadata",
                "from_custom_metadata",
            ):
                outside.append(f"{where(path, node)} .{node.attr}")
    assert outside == []


def test_the_conda_lock_cli_is_a_solver_adapter() -> None:
    """``--solver conda-lock`` runs conda-lock as a program: it lives in the solve stage, and
    the lockfile stage starts no process."""
    for path in sorted(LOCKFILE_STAGE.glob("*.py")):
        if path.name == "git_adapter.py":
            continue  # diff reads a lock from git history
        assert "subprocess" not in path.read_text(encoding="utf-8"), path.name


@pytest.fixture(scope="module")
def locked(
    test_channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[LockRequest, Path]:
    request = LockRequest.for_combo(
        load_catalog().combo("tf114-cuda100"),
        platforms=["linux-64"],
        channel_map=ChannelMap({"defaults": test_channels["defaults"].as_uri()}),
        pip_index=str(test_channels["wheels"]),
    )
    directory = tmp_path_factory.mktemp("home") / "tf114-cuda100"
    lock_combo(request, directory)
    return request, directory


def test_a_read_gives_the_record_parsed(locked: tuple[LockRequest, Path]) -> None:
    request, directory = locked
    lock = read_lock(directory / LOCK_FILE)
    assert isinstance(lock, LockFile)
    assert isinstance(lock.metadata, LockMetadata)
    assert lock.metadata.combo == "tf114-cuda100"
    assert lock.metadata.python == request.python
    assert set(lock.metadata.activation) == {"linux-64"}


def test_the_lock_records_exactly_the_serialised_inputs(
    locked: tuple[LockRequest, Path],
) -> None:
    request, directory = locked
    meta = read_lock(directory / LOCK_FILE).metadata
    assert meta.inputs == {"linux-64": request.inputs["linux-64"].record()}
    assert meta.inputs_sha256 == inputs_hash(request.records())
    assert check_lock(request, directory).fresh


def test_the_inputs_are_one_frozen_value_per_platform(locked: tuple[LockRequest, Path]) -> None:
    request, _ = locked
    inputs = request.inputs["linux-64"]
    assert request.inputs is request.inputs  # resolved once, then kept
    with pytest.raises(dataclasses.FrozenInstanceError):
        inputs.python = "3.6"  # type: ignore[misc]
    assert inputs.channel_urls == (request.channel_map.url("defaults"),)
    assert inputs.activation.combo == "tf114-cuda100"
    # a changed request resolves its own inputs: what --check compares follows the request
    older = dataclasses.replace(request, python="3.6")
    assert older.inputs["linux-64"].record()["python"] == "3.6"
    assert inputs.record()["python"] == request.python != "3.6"
