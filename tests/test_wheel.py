"""The built wheel ships exactly the package, its catalog data and the templates, and works from
a plain install (templates found inside the package, not in the source tree)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _python_m(*args: str) -> None:
    """``python -m ARGS`` with this interpreter; fails the test with its output if it fails."""
    proc = subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _python_m("build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT))
    (built,) = out.glob("envfactory-*.whl")
    return built


def _expected_files() -> set[str]:
    package = ROOT / "envfactory"
    files = {
        p.relative_to(ROOT).as_posix()
        for p in package.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and p.suffix in {".py", ".yaml", ".pickle", ".json"}
    }
    files |= {
        "envfactory/" + p.relative_to(ROOT).as_posix()
        for p in (ROOT / "templates").rglob("*")
        if p.is_file()
    }
    return files


def test_wheel_contains_exactly_package_data_and_templates(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = {n for n in archive.namelist() if ".dist-info/" not in n}
    assert names == _expected_files()
    assert "envfactory/templates/environment.yml.j2" in names
    assert "envfactory/data/combos.yaml" in names
    # the declared requirements of every TF release, read by audit and show (scripts/tf-requires)
    assert "envfactory/data/tf-requires.json" in names
    # the compiled data (envfactory/compiled.py): without it every command reads YAML
    assert {f"envfactory/data/{n}.pickle" for n in ("catalog", "gpus", "explain-patterns")} <= names


def test_installed_wheel_renders_from_its_own_templates(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    _python_m("pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel))
    code = (
        "import json, envfactory.activation.templating as t; "
        "print(json.dumps([t.__file__, str(t.templates_dir())]))"
    )
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    where = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    module, templates = json.loads(where.stdout)
    assert module.startswith(str(target)) and templates.startswith(str(target))
    result = subprocess.run(
        [sys.executable, "-m", "envfactory", "render", "tf114-cuda100", "-p", "win-64", "-o", "-"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "cudatoolkit=10.0.130=0" in result.stdout
