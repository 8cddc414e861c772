"""The PowerShell activation scripts (win-64). There is no pwsh here (research/feasibility.md),
so they are checked, not run: tree-sitter-powershell parses every generated .ps1, and every
piece of the plan and of the reference's state vocabulary (envfactory_core.py) must appear in
it as a PowerShell literal. The checks are shown to fail on broken templates."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path
from typing import Any, Literal

import pytest
import tree_sitter_powershell
from test_activation_core import CORE
from tree_sitter import Language, Node, Parser

from envfactory import __version__
from envfactory.activation import (
    STATE_PREFIX,
    ActivationPlan,
    activation_scripts,
    plan_for,
    render_script,
)
from envfactory.catalog import load_catalog
from envfactory.shellquote import powershell
from envfactory.templating import templates_dir

PARSER = Parser(Language(tree_sitter_powershell.language()))
WINDOWS_COMBOS = sorted(n for n, c in load_catalog().combos.items() if "win-64" in c.platforms)
Phase = Literal["activate", "deactivate"]


def syntax_errors(source: str) -> list[str]:
    """``line:col: ERROR|MISSING ...`` for every error node tree-sitter finds (1-based)."""
    tree = PARSER.parse(source.encode("utf-8"))
    found: list[str] = []
    stack: list[Node] = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            line, col = node.start_point
            kind = "MISSING" if node.is_missing else "ERROR"
            found.append(f"{line + 1}:{col + 1}: {kind} {node.type}")
        stack.extend(node.children)
    return sorted(found, key=lambda s: [int(x) for x in s.split(":")[:2]])


def ps1_scripts(name: str) -> dict[str, str]:
    files = activation_scripts(load_catalog().combo(name), "win-64")
    return {f.relpath: f.content for f in files if f.relpath.endswith(".ps1")}


def test_win64_gets_both_ps1_scripts_with_a_header() -> None:
    name = WINDOWS_COMBOS[0]
    scripts = ps1_scripts(name)
    assert sorted(scripts) == [
        f"etc/conda/activate.d/envfactory-{name}.ps1",
        f"etc/conda/deactivate.d/envfactory-{name}.ps1",
    ]
    for content in scripts.values():
        first = content.splitlines()[0]
        assert f"envfactory {__version__}" in first and name in first
        assert content.endswith("\n") and "\r" not in content
    linux = activation_scripts(load_catalog().combo(name), "linux-64")
    assert not [f for f in linux if f.relpath.endswith(".ps1")]


@pytest.mark.parametrize("name", WINDOWS_COMBOS)
def test_every_ps1_parses(name: str) -> None:
    scripts = ps1_scripts(name)
    assert scripts
    for relpath, content in scripts.items():
        assert syntax_errors(content) == [], relpath


def state_pieces(plan: dict[str, Any]) -> set[str]:
    """The names and values the reference writes into _ENVFACTORY_*, with the variable names
    and indices cut out: what the .ps1 must spell as literals to keep the same state."""
    sample = [p.replace("*", "x") for p in plan["patterns"]]
    path = [sample[0], "C:\\kept", *sample, "C:\\kept", "C:\\kept", sample[0]]
    envs: list[dict[str, str]] = [
        {"PATH": plan["sep"].join(path), "CUDA_PATH_V9_0": "x"},
        {"PATH": "", "CUDA_PATH": "old"},
        {},
    ]
    runs = [(plan, env) for env in envs]
    # the one-empty-entry case needs a plan that adds nothing and a PATH of "<foreign>;"
    bare = plan | {"lists": [(name, []) for name, _ in plan["lists"]]}
    runs.append((bare, {"PATH": sample[0] + plan["sep"]}))
    scalars = sorted({n for n, _ in plan["set"]} | set(plan["unset"]) | {"CUDA_PATH_V9_0"})
    lists = [name for name, _ in plan["lists"]]
    pieces: set[str] = set()
    for run_plan, env in runs:
        changes = CORE["envfactory_activate"](env | {"CONDA_PREFIX": "D:\\e"}, run_plan, bool)
        for key, value in changes.items():
            if not key.startswith(STATE_PREFIX):
                continue
            rest = key.removeprefix(STATE_PREFIX + "0_")
            for name in lists:
                rest = rest.removeprefix(name + "_")
            for name in scalars:
                rest = rest.removeprefix(name) if rest in (name + "_OLD", name + "_NEW") else rest
            pieces.add(re.sub(r"[0-9]+$", "", rest))
            if rest in ("WAS", "LEFT") or (rest.startswith("OCC_") and not value.isdigit()):
                pieces.add(value)
    return pieces


def expected_literals(plan: ActivationPlan) -> list[str]:
    runtime = plan.runtime()
    values = [runtime["combo"], runtime["sep"], runtime["dirsep"], runtime["env_lib_suffix"]]
    values += runtime["patterns"] + runtime["unset"] + runtime["unset_prefixes"]
    for name, prepend in runtime["lists"]:
        values.append(name)
        values += [text for pair in prepend for text in pair]
    for name, (kind, text) in runtime["set"]:
        values += [name, kind, text]
    values += sorted(state_pieces(runtime))
    return [powershell(v) for v in values] + [powershell(STATE_PREFIX)]


@pytest.mark.parametrize("name", WINDOWS_COMBOS)
def test_every_ps1_spells_the_whole_plan_and_the_state_names(name: str) -> None:
    plan = plan_for(load_catalog().combo(name), "win-64")
    expected = expected_literals(plan)
    assert "'REMOVED_'" in expected and "'one-empty'" in expected  # the derivation works
    for relpath, content in ps1_scripts(name).items():
        missing = [literal for literal in expected if literal not in content]
        assert missing == [], relpath
        assert ("$efyFold = $true" in content) is plan.fold_case


def test_hostile_plan_values_are_quoted_and_still_parse() -> None:
    plan = plan_for(load_catalog().combo(WINDOWS_COMBOS[0]), "win-64")
    odd = 'C:\\it\'s \u2018q\u2019 $x `n "d" {b}*\\bin'  # PowerShell: \u2018 \u2019 quote too
    hostile = dataclasses.replace(
        plan,
        foreign_patterns=(*plan.foreign_patterns, odd),
        set_vars=(*plan.set_vars, ("ODD_VAR", dataclasses.replace(plan.set_vars[0][1], text=odd))),
    )
    for phase in ("activate", "deactivate"):
        content = render_script(hostile, "ps1", phase).content
        assert "'C:\\it''s \u2018\u2018q\u2019\u2019 $x `n \"d\" {b}*\\bin'" in content
        assert syntax_errors(content) == []


BREAKAGES = {
    "unbalanced brace": (
        "            return $Default\n        }\n",
        "            return $Default\n",
    ),
    "unterminated string": ("return '0'\n", "return '0\n"),
    "unclosed parenthesis": ("for ($i = 0; $i -lt $count; $i++)", "for ($i = 0; $i -lt $count"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_the_syntax_check_catches_a_broken_template(breakage: str, tmp_path: Path) -> None:
    old, new = BREAKAGES[breakage]
    template = (templates_dir() / "activation" / "script.ps1.j2").read_text(encoding="utf-8")
    assert old in template
    broken = tmp_path / "script.ps1.j2"
    broken.write_text(template.replace(old, new, 1), encoding="utf-8")
    plan = plan_for(load_catalog().combo(WINDOWS_COMBOS[0]), "win-64")
    phases: tuple[Phase, Phase] = ("activate", "deactivate")
    for phase in phases:
        errors = syntax_errors(render_script(plan, "ps1", phase, tmp_path).content)
        assert errors, f"{breakage} not caught in the {phase} script"
        assert re.fullmatch(r"[0-9]+:[0-9]+: (ERROR|MISSING) .*", errors[0])
    # an untouched copy of the template passes: the failure comes from the breakage
    intact = tmp_path / "intact"
    intact.mkdir()
    shutil.copy(templates_dir() / "activation" / "script.ps1.j2", intact)
    assert syntax_errors(render_script(plan, "ps1", "activate", intact).content) == []


def test_the_plan_check_catches_a_dropped_pattern() -> None:
    name = WINDOWS_COMBOS[0]
    plan = plan_for(load_catalog().combo(name), "win-64")
    fewer = dataclasses.replace(plan, foreign_patterns=plan.foreign_patterns[:-1])
    content = render_script(fewer, "ps1", "activate").content
    assert syntax_errors(content) == []
    assert [lit for lit in expected_literals(plan) if lit not in content] == [
        powershell(plan.foreign_patterns[-1])
    ]
