"""Each command imports only what it uses (how fast it starts is measured by
benchmarks/bench_cli.py, never timed here): no conda-lock, pydantic or py-rattler for the
catalog and diagnosis commands, no Jinja for those that render nothing, no rich for what they
print (plain lines; rich draws only the progress bar on a terminal), no YAML reader while the
compiled catalog is fresh, and no importlib.metadata to learn the version."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from crafted import Crafted, crafted_lock

import envfactory

SOLVER_SIDE = {"conda_lock", "pydantic", "rattler", "requests"}
# The catalog, the GPU table and explain's patterns are read from their compiled form (envfactory/
# compiled.py): no YAML reader unless a data file was edited.
YAML_READER = {"yaml", "envfactory.yamlio"}

PROBE = """
import json, sys
from envfactory.cli import run
import io
real = sys.stdout
sys.stdout = io.StringIO()
code = run(sys.argv[1:])
sys.stdout = real
loaded = sorted({m.split(".")[0] for m in sys.modules} | {m for m in sys.modules if "." in m})
print(json.dumps([code, loaded]))
"""

LOG = b"Could not load dynamic library 'libcudnn.so.7'; dlerror: libcudnn.so.7: cannot open\n"


def modules_of(*args: str, cwd: Path, stdin: bytes = b"") -> tuple[int, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )
    code, loaded = json.loads(proc.stdout.decode().splitlines()[-1])
    return code, set(loaded)


@pytest.mark.parametrize(
    ("args", "codes", "absent"),
    [
        (["--help"], {0}, {"jinja2", "yaml", "rich", "ruamel", "envfactory.catalog"}),
        (["--version"], {0}, {"jinja2", "yaml", "rich", "ruamel", "envfactory.catalog"}),
        (["list", "--json"], {0}, {"jinja2", "rich", "ruamel", "envfactory.build"} | YAML_READER),
        (["list"], {0}, {"jinja2", "rich", "ruamel", "envfactory.build"} | YAML_READER),
        (
            ["show", "tf114-cuda100"],
            {0},
            {"jinja2", "rich", "ruamel", "envfactory.build"} | YAML_READER,
        ),
        (
            ["render", "tf114-cuda100", "-o", "out"],
            {0},
            {"rich", "ruamel", "envfactory.diagnose"} | YAML_READER,
        ),
        (
            ["compat", "tf114-cuda100", "--gpu", "RTX 2080", "--driver", "450.80.02"],
            {0},
            {"jinja2", "rich", "ruamel", "envfactory.build"} | YAML_READER,
        ),
        (["explain", "-"], {0, 3}, {"jinja2", "rich", "ruamel", "envfactory.build"} | YAML_READER),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_a_command_imports_only_what_it_uses(
    tmp_path: Path, args: list[str], codes: set[int], absent: set[str]
) -> None:
    code, loaded = modules_of(*args, cwd=tmp_path, stdin=LOG)
    assert code in codes
    assert not loaded & (absent | SOLVER_SIDE)
    assert "importlib.metadata" not in loaded


def test_create_imports_no_conda_lock_renderer_or_progress_bar(tmp_path: Path) -> None:
    """``create`` reads the lock without conda-lock (lockfile/read.py), needs no template,
    catalog or project reader when the lock names no combo and there is no envfactory.yaml,
    no packaging without wheels, and no rich progress bar when stderr is not a terminal
    (issue 11: a warm create against rattler's own install of the same records)."""
    lock = crafted_lock(tmp_path / "set", [Crafted("p1", files={"lib/p1/a.txt": b"a\n"})])
    args = ["create", str(lock), "-p", str(tmp_path / "env"), "--platform", "linux-64"]
    code, loaded = modules_of(*args, cwd=tmp_path)
    assert code == 0
    assert (tmp_path / "env" / "lib" / "p1" / "a.txt").read_bytes() == b"a\n"
    assert "rattler" in loaded and "envfactory.install.create" in loaded
    unused = {
        "conda_lock", "pydantic", "jinja2", "ruamel", "rich.progress", "packaging",
        "importlib.metadata", "envfactory.render.environment", "envfactory.solve.lock",
        "envfactory.project.manifest", "envfactory.catalog.loader",
        "envfactory.activation.templating",
    }  # fmt: skip
    assert not loaded & unused


def test_the_project_file_name_is_the_manifests() -> None:
    """targets.py names the project file itself so that it imports the manifest reader only
    when there is one."""
    from envfactory.project import manifest, targets

    assert targets.PROJECT_FILE == manifest.PROJECT_FILE


def test_the_version_is_the_package_metadata_version() -> None:
    """``__version__`` is written once, in envfactory/__init__.py; hatchling copies it into the
    package metadata (the editable install here is built the same way as the wheel)."""
    from importlib.metadata import version

    assert envfactory.__version__ == version("envfactory")


def test_the_console_script_s_collector_passes_are_rare_and_skip_the_imports() -> None:
    """``load_cli`` (the console script, ``python -m envfactory``) freezes what the imports made
    out of the collector's passes and spaces the passes out (GC_THRESHOLD allocations): the
    collector stays on, so cyclic garbage is still freed."""
    code = (
        "import gc, json; from envfactory.__main__ import GC_THRESHOLD, load_cli; "
        "before = gc.get_threshold(); load_cli(); "
        "print(json.dumps([before, gc.get_threshold(), gc.isenabled(), gc.get_freeze_count(), "
        "GC_THRESHOLD]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after, enabled, frozen, threshold = json.loads(out.stdout)
    assert before[0] == 700  # CPython's default
    assert after == [threshold, *before[1:]]
    assert threshold >= 50_000
    assert enabled
    assert frozen > 10_000  # the CLI's modules, classes and functions
