"""The package layout is the pipeline: one subpackage per stage, no module imports one of a later
stage, no import cycle, no stage holds more than a quarter of the code.

Stages, bottom to top (a module may import its own stage and the ones below):
0. the ground: errors, fsio, yamlio, progress, untrusted text, the host adapter, network settings,
   the files envfactory writes itself, compiled data, the package itself
1. catalog: the typed facts and their loader
2. activation: the activation plan, its core, shell quoting, and the Jinja setup
3. render: a combo into environment files
4. lockfile: the lock format, read, modelled and written
5. cache: the shared package cache (conda archives and pip wheels)
6. solve: lock requests, the solvers and the post-solve checks
7. install: create, update, verify, mirror, the pip side, kernels
8. project: envfactory.yaml manifests and target environments
9. diagnose: doctor, compat, explain, audit
10. cli: parses and prints, nothing imports it
Imports inside functions (lazy imports) count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "envfactory"

LAYERS: dict[str, int] = {
    "envfactory": 0,
    "envfactory.__main__": 10,
    "envfactory.errors": 0,
    "envfactory.fsio": 0,
    "envfactory.yamlio": 0,
    "envfactory.progress": 0,
    "envfactory.untrusted": 0,
    "envfactory.host": 0,
    "envfactory.netconfig": 0,
    "envfactory.ownfiles": 0,
    "envfactory.compiled": 0,
    "envfactory.catalog": 1,
    "envfactory.activation": 2,
    "envfactory.render": 3,
    "envfactory.lockfile": 4,
    "envfactory.cache": 5,
    "envfactory.solve": 6,
    "envfactory.install": 7,
    "envfactory.project": 8,
    "envfactory.diagnose": 9,
    "envfactory.cli": 10,
}


def stage_of(module: str) -> str:
    """The stage a module belongs to: ``envfactory.<stage>`` (a subpackage or a ground module)."""
    return ".".join(module.split(".")[:2])


def layer_of(module: str) -> int:
    """The layer of the stage ``module`` belongs to; KeyError for a module of no known stage."""
    if module == "envfactory.__version__":  # defined by the package itself
        return 0
    return LAYERS[stage_of(module)]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "envfactory":
                found += [(node.lineno, f"envfactory.{a.name}") for a in node.names]
            elif node.module.startswith("envfactory."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("envfactory")]
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    unplaced = []
    for path in MODULES:
        try:
            layer_of(module_name(path))
        except KeyError:
            unplaced.append(module_name(path))
    assert unplaced == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_module_imports_one_above_its_layer(path: Path) -> None:
    own = layer_of(module_name(path))
    upward = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} (layer {layer_of(target)})"
        for line, target in imports_of(path)
        if layer_of(target) > own
    ]
    assert upward == [], f"{module_name(path)} is on layer {own}"


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The rule is not vacuous: a catalog module importing the CLI is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from envfactory.cli import app\n", encoding="utf-8")
    assert [(line, t) for line, t in imports_of(bad)] == [(2, "envfactory.cli")]
    assert layer_of("envfactory.cli") > layer_of("envfactory.catalog.loader")


def test_a_new_top_level_module_has_no_layer_until_placed() -> None:
    """A module dropped next to the ground modules is not placed by default."""
    with pytest.raises(KeyError):
        layer_of("envfactory.newthing")
    assert layer_of("envfactory.install.create") == LAYERS["envfactory.install"]


def module_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports (lazy ones too)."""
    names = {module_name(path) for path in MODULES}
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        targets = set()
        for _, target in imports_of(path):
            # "from envfactory.x import name" names a module or a name defined in one
            targets.add(target if target in names else target.rpartition(".")[0])
        graph[module_name(path)] = {t for t in targets if t in names} - {module_name(path)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_modules() -> None:
    assert cycles(module_graph()) == []


def test_the_cycle_finder_sees_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_stage_holds_more_than_a_quarter_of_the_code() -> None:
    lines: dict[str, int] = {}
    for path in MODULES:
        stage = stage_of(module_name(path))
        lines[stage] = lines.get(stage, 0) + len(path.read_text(encoding="utf-8").splitlines())
    total = sum(lines.values())
    heavy = {stage: f"{n / total:.0%}" for stage, n in lines.items() if n > total * 0.25}
    assert heavy == {}


def test_no_folder_is_named_build() -> None:
    """Python tooling treats a folder named build as output: none holds the package's code."""
    assert [p for p in PACKAGE.rglob("build") if p.is_dir()] == []


def outside_imports(roots: tuple[str, ...], home: str) -> list[str]:
    """``module:line imports name`` for each import (lazy ones too) of a top-level package in
    ``roots`` by a module outside ``home`` (a module or a package prefix)."""
    outside = []
    for path in MODULES:
        if module_name(path) == home or module_name(path).startswith(home + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            outside += [
                f"{module_name(path)}:{node.lineno} imports {n}"
                for n in names
                if n.split(".")[0] in roots
            ]
    return outside


def test_only_the_lockfile_stage_imports_conda_lock() -> None:
    assert outside_imports(("conda_lock",), "envfactory.lockfile") == []


def test_the_import_finder_sees_an_import_outside_its_home() -> None:
    """Not vacuous: the CLI imports typer, and it is found from any other home."""
    assert any(line.startswith("envfactory.cli") for line in outside_imports(("typer",), "x"))
    assert not any(
        line.startswith("envfactory.cli") for line in outside_imports(("typer",), "envfactory.cli")
    )


# --- a host-neutral core ---------------------------------------------------------------------

# Modules of the standard library that exist on one kind of host only (the library reference's
# "Availability" notes: https://docs.python.org/3/library/unix.html and .../windows.html).
POSIX_ONLY = frozenset(
    {"fcntl", "pwd", "grp", "termios", "tty", "pty", "resource", "posix", "syslog", "crypt",
     "spwd", "nis", "ossaudiodev", "readline", "curses"}
)  # fmt: skip
WINDOWS_ONLY = frozenset({"msvcrt", "winreg", "_winapi", "winsound", "nt"})
HOST_ADAPTER = "envfactory.host"


def module_level_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """``(line, top-level module)`` of every import that runs when the module is imported: not
    inside a function, nor under ``if TYPE_CHECKING:``."""
    found: list[tuple[int, str]] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.extend((node.lineno, a.name.split(".")[0]) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((node.lineno, node.module.split(".")[0]))
            elif isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
                visit(node.orelse)
            elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                # class bodies, try/except/else/finally, if/else, with, loops: run at import
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                for name in ("body", "orelse", "finalbody"):
                    visit(getattr(node, name, []))

    visit(tree.body)
    return found


def host_only_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for line, name in module_level_imports(tree)
        if name in POSIX_ONLY | WINDOWS_ONLY
    ]


def test_no_module_imports_a_host_only_module_at_import_time() -> None:
    """``import fcntl`` at module level in the cache ended every cache-using command on a
    Windows host in an internal error; what one host lacks is imported inside a function, and
    the host differences live in ``envfactory/host.py``."""
    found = [
        problem
        for path in MODULES
        if module_name(path) != HOST_ADAPTER
        for problem in host_only_imports(path)
    ]
    assert found == []


def test_the_host_check_sees_a_planted_import(tmp_path: Path) -> None:
    planted = tmp_path / "envfactory" / "cache" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(
        "from __future__ import annotations\n"
        "import os\n"
        "import fcntl\n"
        "try:\n    import msvcrt\nexcept ImportError:\n    pass\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import termios\n"
        "class A:\n    import pwd\n"
        "def f():\n    import grp\n",
        encoding="utf-8",
    )
    tree = ast.parse(planted.read_text(encoding="utf-8"))
    hits = [(line, n) for line, n in module_level_imports(tree) if n in POSIX_ONLY | WINDOWS_ONLY]
    assert hits == [(3, "fcntl"), (5, "msvcrt"), (12, "pwd")]


def test_only_yamlio_parses_yaml() -> None:
    """One YAML reading layer, one typing rule: PyYAML and ruamel are imported only by
    ``envfactory/yamlio.py`` (lazy imports count)."""
    assert outside_imports(("yaml", "ruamel", "_ruamel_yaml"), "envfactory.yamlio") == []
