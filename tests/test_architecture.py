"""The package layout is the pipeline: no module imports one above its layer.

Layers, bottom to top (a module may import its own layer and the ones below):
0. the ground: errors, fsio, yamlio, progress, the package itself
1. catalog: the typed facts and their loader
2. the activation plan, shell quoting, and the Jinja setup (its filters are the shell quoting)
3. build: render -> checks -> lock -> create / verify / mirror, and their tool adapters
4. consumers of built environments: project manifests, kernels, diagnose
5. cli: parses and prints, nothing imports it
Imports inside functions (lazy imports) count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "envfactory"

LAYERS: dict[str, int] = {
    "envfactory": 0,
    "envfactory.__main__": 5,
    "envfactory.errors": 0,
    "envfactory.fsio": 0,
    "envfactory.yamlio": 0,
    "envfactory.progress": 0,
    "envfactory.templating": 2,
    "envfactory.catalog": 1,
    "envfactory.activation": 2,
    "envfactory.activation.kernel": 4,
    "envfactory.build": 3,
    "envfactory.project": 4,
    "envfactory.diagnose": 4,
    "envfactory.cli": 5,
}


def layer_of(module: str) -> int:
    """The layer of the longest prefix of ``module`` named in LAYERS."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name in LAYERS:
            return LAYERS[name]
    raise KeyError(module)


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
