"""One rule for what NAME means (envfactory/project/targets.py), used by create, mirror, kernel."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envfactory.errors import UserInputError
from envfactory.project.targets import lock_target, named_prefix, prefix_target

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tf1-tf2" / "envfactory.yaml"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory holding the example manifest, a lock for 'legacy', and a combo lock
    under ./locks; the working directory is the project's."""
    shutil.copy(EXAMPLE, tmp_path / "envfactory.yaml")
    for name in ("legacy", "tf114-cuda100"):
        (tmp_path / "locks" / name).mkdir(parents=True)
        (tmp_path / "locks" / name / "conda-lock.yml").write_text("x: 1\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_project_environment_wins(project: Path) -> None:
    target = lock_target("legacy")
    assert target.kind == "project environment"
    assert target.lock == project / "locks" / "legacy" / "conda-lock.yml"
    assert target.default_prefix == project / "envs" / "legacy"
    assert "combo tf114-cuda100" in target.describe()


def test_a_project_environment_without_a_lock_says_how_to_make_it(project: Path) -> None:
    with pytest.raises(UserInputError, match="'modern' has no lock yet") as info:
        lock_target("modern")
    assert "envfactory lock modern" in (info.value.hint or "")


def test_a_path_to_a_lock_or_its_directory(project: Path) -> None:
    lock = project / "locks" / "legacy" / "conda-lock.yml"
    assert lock_target(str(lock)).kind == "lockfile"
    assert lock_target(str(lock.parent)).lock == lock.parent / "conda-lock.yml"


def test_a_combo_is_looked_up_under_the_locks_dir(project: Path, tmp_path: Path) -> None:
    target = lock_target("tf114-cuda100")
    assert (target.kind, target.lock) == ("combo", Path("locks/tf114-cuda100/conda-lock.yml"))
    assert target.default_prefix is None
    with pytest.raises(UserInputError, match="no lockfile found for 'tf114-cuda100'"):
        lock_target("tf114-cuda100", locks_dir=tmp_path / "elsewhere")


def test_an_unknown_name_is_an_error_with_a_hint(project: Path) -> None:
    with pytest.raises(UserInputError, match="no environment 'nope' in") as info:
        lock_target("nope")
    # 'nope' is neither a project environment nor a combo: 'envfactory lock nope' would fail too
    assert "envfactory lock" not in (info.value.hint or "")
    assert "is not a project environment, a combo" in (info.value.hint or "")


def test_prefix_target(project: Path) -> None:
    assert prefix_target("legacy") == project / "envs" / "legacy"
    (project / "somewhere").mkdir()
    assert prefix_target("somewhere") == Path("somewhere")
    with pytest.raises(UserInputError, match="neither an environment"):
        prefix_target("nothing-here")


@pytest.mark.parametrize("bad", ["..", ".", "../x", "/abs", "a/b", "abc\n", "", "-x"])
def test_named_prefix_takes_plain_names_only(bad: str) -> None:
    with pytest.raises(UserInputError, match="plain environment name"):
        named_prefix(bad)


def test_named_prefix_uses_conda_envs_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDA_ENVS_PATH", str(tmp_path / "envs"))
    assert named_prefix("tf1") == tmp_path / "envs" / "tf1"
