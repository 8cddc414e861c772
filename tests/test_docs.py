"""The README is short, its links resolve inside the repository, and its quick start works
copy-pasted (run here against the local test channels, through the same environment variables
a user on an air-gapped machine sets)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_every_link_resolves_inside_the_repository() -> None:
    broken = []
    for page in [README, *DOCS]:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (page.parent / target).resolve()
            if not path.exists() or ROOT not in path.parents:
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_no_page_points_outside_the_repository() -> None:
    for page in [README, *DOCS]:
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text and "/work/" not in text, page


def test_the_pipeline_picture_names_modules_that_exist() -> None:
    dot = (ROOT / "docs" / "pipeline.dot").read_text(encoding="utf-8")
    named = re.findall(r"envfactory/[\w/]+(?:\.py|/)", dot)
    assert len(named) >= 10
    assert [n for n in named if not (ROOT / n).exists()] == []


def quickstart_commands(marker: str = "quickstart-online") -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    block = text.split(f"<!-- {marker}:begin -->", 1)[1].split(f"<!-- {marker}:end -->", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("envfactory ")]


@pytest.mark.slow
def test_the_quick_start_runs_as_written(test_channels: dict[str, Path], tmp_path: Path) -> None:
    """The online quick start, against the test channels through the variables an air-gapped
    user sets (the offline one: tests/test_quickstart.py)."""
    commands = quickstart_commands()
    assert [c[1] for c in commands] == ["lock", "create", "doctor"]
    env = {
        **os.environ,
        "ENVFACTORY_CHANNEL_MAP": f"defaults={test_channels['defaults'].as_uri()}",
        "ENVFACTORY_PIP_INDEX": str(test_channels["wheels"]),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "CONDA_ENVS_DIRS": str(tmp_path / "conda-envs"),  # where -n NAME goes
    }
    work = tmp_path / "project"
    work.mkdir()
    for argv in commands:
        proc = subprocess.run(
            [ENVFACTORY, *argv[1:]], cwd=work, env=env, capture_output=True, text=True, timeout=600
        )
        # doctor exits 3 on a machine without an NVIDIA GPU (this one): problems found
        allowed = (0, 3) if argv[1] == "doctor" else (0,)
        assert proc.returncode in allowed, (argv, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert (work / "locks" / "tf114-cuda100" / "conda-lock.yml").is_file()
    named = tmp_path / "conda-envs" / "tf114"
    assert (named / "conda-meta" / "envfactory.json").is_file()
    assert list((named / "etc" / "conda" / "activate.d").glob("*.sh"))


# --- the package cites only what a reader of the repository can open ------------------------

# Citations of documents that are not in the repository: the research notes and design of the
# sessions that built it, and their issue numbers. A public source is cited by its URL, a
# document of the repository by its path (docs/..., benchmarks/...).
OUTSIDE_CITATION = re.compile(
    r"shared/research|/work/shared|research/[\w-]+\.(?:md|yaml)|feasibility\.md|compat-facts"
    r"|DESIGN\.md|STYLE\.md|\bdesign §|\bdecision \d+|\b[Ii]ssues? \d+"
)


def citations_outside(path: Path, root: Path = ROOT) -> list[str]:
    """``path:line: text`` of each citation of a document outside the repository: anywhere in a
    Python module or template, in the comments of a YAML data file (its values cite public
    sources by their own names)."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = line
        if path.suffix == ".yaml":
            text = line.lstrip() if line.lstrip().startswith("#") else line.partition(" #")[2]
        if OUTSIDE_CITATION.search(text):
            found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def package_texts() -> list[Path]:
    package = ROOT / "envfactory"
    return sorted(
        p for p in package.rglob("*") if p.is_file() and p.suffix in (".py", ".yaml", ".j2")
    )


def test_no_comment_or_docstring_cites_a_document_outside_the_repository() -> None:
    assert len(package_texts()) >= 80
    assert [hit for path in package_texts() for hit in citations_outside(path)] == []


def test_the_citation_check_sees_each_kind(tmp_path: Path) -> None:
    planted = tmp_path / "envfactory" / "m.py"
    planted.parent.mkdir()
    lines = [
        "# measured (shared/research/feasibility.md §1d)",
        '"""see /work/shared/DESIGN.md"""',
        "x = 1  # design §3",
        "# DESIGN.md, decision 15",
        "# the warm create (issue 11)",
        "# fixed in issues 28 and 29",
        "# tensorflow/tensorflow#46537 and https://github.com/org/repo/issues/5 are fine",
        "# docs/security.md is fine",
    ]
    planted.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = tmp_path / "envfactory" / "d.yaml"
    data.write_text(
        "# from shared/research/compat-facts.md\n"
        "a: 'tensorflow issues 32553 and 30427'  # a value may name a public issue\n"
        "b: 1  # but not a comment: issue 28\n",
        encoding="utf-8",
    )
    hits = citations_outside(planted, tmp_path) + citations_outside(data, tmp_path)
    assert [h.split(":")[1] for h in hits] == ["1", "2", "3", "4", "5", "6", "1", "3"]


# --- docs/architecture.md and the package -----------------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
MODULE_PATH = re.compile(r"envfactory/[\w/]+\.py\b")


def package_modules(root: Path = ROOT) -> set[str]:
    """Every module of the package as a path from the repository root; an empty
    ``__init__.py`` (a folder marker, nothing to describe) does not count."""
    return {
        path.relative_to(root).as_posix()
        for path in (root / "envfactory").rglob("*.py")
        if path.name != "__init__.py" or path.read_text(encoding="utf-8").strip()
    }


def architecture_gaps(
    page: str, modules: set[str], root: Path = ROOT
) -> tuple[list[str], list[str]]:
    """The modules ``page`` does not name, and the module paths it names that do not exist."""
    named = set(MODULE_PATH.findall(page))
    return sorted(modules - named), sorted(n for n in named if not (root / n).is_file())


def test_the_architecture_page_names_every_module_and_only_modules_that_exist() -> None:
    modules = package_modules()
    assert len(modules) >= 70
    missing, stale = architecture_gaps(ARCHITECTURE.read_text(encoding="utf-8"), modules)
    assert missing == [], "modules docs/architecture.md does not describe"
    assert stale == [], "modules docs/architecture.md names that do not exist"


def test_the_architecture_check_sees_a_missing_and_a_stale_module(tmp_path: Path) -> None:
    (tmp_path / "envfactory" / "sub").mkdir(parents=True)
    for name in ("envfactory/a.py", "envfactory/sub/b.py", "envfactory/sub/__init__.py"):
        (tmp_path / name).write_text("", encoding="utf-8")
    (tmp_path / "envfactory" / "__init__.py").write_text('"""the package"""\n', encoding="utf-8")
    modules = package_modules(tmp_path)
    assert modules == {"envfactory/a.py", "envfactory/sub/b.py", "envfactory/__init__.py"}
    page = (
        "`envfactory/a.py` does this; `envfactory/build/lock.py` did that; envfactory/__init__.py"
    )
    assert architecture_gaps(page, modules, tmp_path) == (
        ["envfactory/sub/b.py"],
        ["envfactory/build/lock.py"],
    )


def test_the_architecture_page_lists_the_stages_the_architecture_test_enforces() -> None:
    """The stage table is the one tests/test_architecture.py holds the imports to."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("arch", ROOT / "tests" / "test_architecture.py")
    assert spec and spec.loader
    arch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(arch)
    page = ARCHITECTURE.read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `(\w+)/` \|", page, re.MULTILINE)
    stages = {f"envfactory.{name}": int(layer) for layer, name in rows}
    subpackages = {k for k in arch.LAYERS if (ROOT / k.replace(".", "/")).is_dir()}
    assert stages == {k: arch.LAYERS[k] for k in subpackages - {"envfactory"}}
