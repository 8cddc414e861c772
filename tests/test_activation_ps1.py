"""The PowerShell activation scripts (win-64). There is no pwsh here (research/feasibility.md),
so they are checked three ways: tree-sitter-powershell parses every generated .ps1; every piece
of the plan and of the reference's state vocabulary (envfactory_core.py) must appear in it as a
PowerShell literal; and a small evaluator of the PowerShell subset the template uses (a model
of PowerShell written here, not PowerShell) runs the scripts' logic against the reference in
sessions of activate, reactivate, stack and deactivate. Each check is shown to fail on a broken
template."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path
from typing import Any, Literal

import pytest
import tree_sitter_powershell
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_activation_core import CORE
from tree_sitter import Language, Node, Parser

from envfactory import __version__
from envfactory.activation.plan import (
    STATE_PREFIX,
    ActivationPlan,
    activation_scripts,
    plan_for,
    render_script,
)
from envfactory.activation.shellquote import powershell
from envfactory.catalog.loader import load_catalog
from envfactory.templating import templates_dir

PARSER = Parser(Language(tree_sitter_powershell.language()))
WINDOWS_COMBOS = sorted(n for n, c in load_catalog().combos.items() if "win-64" in c.platforms)
Phase = Literal["activate", "deactivate"]
Env = dict[str, str]


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


# --- running the .ps1 without pwsh ------------------------------------------------------------
# A small evaluator of the PowerShell subset the template uses, over tree-sitter's parse tree.
# It is a model, written from PowerShell's documentation, not PowerShell: it runs the script's
# own control flow, names and indices against the reference, and it models the semantics the
# script relies on ($null and '' as distinct, -eq folding case and -ceq not, function output
# collected and unrolled, ,$x stopping that, Set-Item of '' removing a variable). Anything
# outside the subset raises, so a template that drifts from it fails here instead of passing.


class _Flow(Exception):
    pass


class _Return(_Flow):
    pass


class _Break(_Flow):
    pass


class _Continue(_Flow):
    pass


VOID = object()  # what a void method or a [void] cast yields: no pipeline output


class NetList(list[Any]):
    """System.Collections.Generic.List[T]: one object in the pipeline, unlike an array."""


class Wrapped(list[Any]):
    """The array ``,$x`` makes: unrolled once on output, leaving ``$x`` whole."""


@dataclasses.dataclass
class Func:
    params: list[tuple[str, str | None]]
    body: Node


class PsModel:
    def __init__(self, env: dict[str, str], is_dir: Any) -> None:
        self.env = dict(env)
        self.is_dir = is_dir
        self.scopes: list[dict[str, Any]] = [{}]

    # environment (Windows: names fold case)
    def _env_key(self, name: str) -> str | None:
        return next((k for k in self.env if k.upper() == name.upper()), None)

    def env_get(self, name: str) -> str | None:
        key = self._env_key(name)
        return None if key is None else self.env[key]

    def env_set(self, name: str, value: str | None) -> None:
        key = self._env_key(name)
        if key is not None:
            del self.env[key]
        if value:  # PowerShell removes a variable set to ''
            self.env[key or name] = value

    # scopes
    def lookup(self, name: str) -> Any:
        low = name.lower()
        if low in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[low]
        for scope in reversed(self.scopes):
            if low in scope:
                return scope[low]
        raise AssertionError(f"unset variable ${name}")

    def assign(self, name: str, value: Any) -> None:
        # a plain $x = ... always makes or sets $x in the current scope, never a caller's
        self.scopes[-1][name.lower()] = value

    # running
    def run(self, source: str) -> dict[str, str]:
        tree = PARSER.parse(source.encode("utf-8"))
        assert not tree.root_node.has_error
        out: list[Any] = []
        for child in tree.root_node.named_children:
            if child.type == "statement_list":
                self.statements(child, out)
        assert out == [], f"the script writes to the pipeline: {out!r}"
        return self.env

    def statements(self, node: Node, out: list[Any]) -> None:
        for child in node.named_children:
            if child.type != "comment":
                self.statement(child, out)

    def block(self, node: Node, out: list[Any]) -> None:
        for child in node.named_children:
            if child.type == "statement_list":
                self.statements(child, out)

    def statement(self, node: Node, out: list[Any]) -> None:
        kind = node.type
        if kind == "function_statement":
            name = node.child_by_field_name("function_name") or node.named_children[0]
            body = next(c for c in node.named_children if c.type == "script_block")
            params: list[tuple[str, str | None]] = []
            for block in body.named_children:
                if block.type == "param_block":
                    for param in _descendants(block, "script_parameter"):
                        var = next(c for c in param.named_children if c.type == "variable")
                        typed = _descendants(param, "type_identifier")
                        params.append((_text(var)[1:], _text(typed[-1]) if typed else None))
            self.scopes[-1]["function:" + _text(name).lower()] = Func(params, body)
        elif kind == "if_statement":
            self.if_statement(node, out)
        elif kind == "for_statement":
            parts = {c.type: c for c in node.named_children}
            body = parts["statement_block"]
            self.pipeline(parts["for_initializer"], [])
            while _truthy(self.value(parts["for_condition"])):
                try:
                    self.block(body, out)
                except _Break:
                    break
                except _Continue:
                    pass
                self.pipeline(parts["for_iterator"], [])
        elif kind == "foreach_statement":
            var, source, body = node.named_children
            items = self.value(source)
            for item in _enumerate(items):
                self.assign(_text(var)[1:], item)
                try:
                    self.block(body, out)
                except _Break:
                    break
                except _Continue:
                    continue
        elif kind == "flow_control_statement":
            word = node.children[0].type
            if word == "return":
                if node.named_child_count:
                    self.pipeline(node.named_children[0], out)
                raise _Return()
            raise {"break": _Break, "continue": _Continue}[word]()
        elif kind == "pipeline":
            self.pipeline(node, out)
        else:
            raise AssertionError(f"statement {kind} outside the modelled subset")

    def if_statement(self, node: Node, out: list[Any]) -> None:
        children = node.named_children
        if _truthy(self.value(children[0])):
            return self.block(children[1], out)
        for extra in children[2:]:
            if extra.type == "elseif_clauses":
                for clause in extra.named_children:
                    cond, body = clause.named_children
                    if _truthy(self.value(cond)):
                        return self.block(body, out)
            elif extra.type == "else_clause":
                return self.block(extra.named_children[0], out)
        return None

    def pipeline(self, node: Node, out: list[Any]) -> None:
        node = _unwrap(node)
        if node.type == "assignment_expression":
            left, _, right = node.named_children
            value = self.value(right)
            left = _unwrap(left)
            if left.type == "variable":
                self.assign(_text(left)[1:], value)
            elif left.type == "element_access":
                target, index = left.named_children
                self.value(target)[self.value(index)] = value
            else:
                raise AssertionError(f"assignment to {left.type}")
            return
        if node.type in ("post_increment_expression", "post_decrement_expression"):
            name = _text(node.named_children[0])[1:]
            self.assign(name, self.lookup(name) + (1 if "increment" in node.type else -1))
            return
        if node.type == "command":
            out.extend(self.command(node))
            return
        _emit(self.expr(node), out)

    def value(self, node: Node) -> Any:
        """A pipeline used as a value: a command's output collected, an expression as it is."""
        node = _unwrap(node)
        if node.type == "command":
            return _collect(self.command(node))
        if node.type in ("assignment_expression", "post_increment_expression"):
            self.pipeline(node, [])
            return None
        return self.expr(node)

    def command(self, node: Node) -> list[Any]:
        first = node.named_children[0]
        if first.type == "command_invokation_operator":
            block = node.named_children[1]
            return self.call_block(block, [])
        name = _text(first)
        positional: list[Any] = []
        named: dict[str, Any] = {}
        elements = node.named_children[1].named_children if node.named_child_count > 1 else []
        args = [e for e in elements if e.type != "command_argument_sep"]
        i = 0
        while i < len(args):
            arg = args[i]
            if arg.type == "command_parameter":
                named[_text(arg)[1:].lower()] = self.arg(args[i + 1])
                i += 2
            else:
                positional.append(self.arg(arg))
                i += 1
        func = self.find_function(name)
        if func is not None:
            assert not named, f"{name}: named arguments to functions are not modelled"
            return self.call(func, positional)
        return self.cmdlet(name, positional, named)

    def arg(self, node: Node) -> Any:
        node = _unwrap(node)
        if node.type == "generic_token":
            return _text(node)
        return self.expr(node)

    def find_function(self, name: str) -> Func | None:
        for scope in reversed(self.scopes):
            found = scope.get("function:" + name.lower())
            if found is not None:
                assert isinstance(found, Func)
                return found
        return None

    def call(self, func: Func, args: list[Any]) -> list[Any]:
        assert len(args) <= len(func.params), "more arguments than parameters"
        scope: dict[str, Any] = {}
        for i, (pname, ptype) in enumerate(func.params):
            given = args[i] if i < len(args) else None
            if ptype == "string":
                given = "" if given is None else str(given)
            scope[pname.lower()] = given
        return self.call_block(func.body, [], scope)

    def call_block(
        self, node: Node, args: list[Any], scope: dict[str, Any] | None = None
    ) -> list[Any]:
        del args
        self.scopes.append(scope or {})
        out: list[Any] = []
        try:
            for part in _descendants(node, "statement_list"):
                self.statements(part, out)
        except _Return:
            pass
        finally:
            self.scopes.pop()
        return out

    def cmdlet(self, name: str, positional: list[Any], named: dict[str, Any]) -> list[Any]:
        path = named.pop("literalpath", None) or named.pop("path", None)
        assert not positional and isinstance(path, str), (name, positional, named)
        if name == "Get-ChildItem" and path == "Env:":
            return [{"Name": k, "Value": v} for k, v in sorted(self.env.items())]
        if not path.startswith("Env:"):
            assert name == "Test-Path" and named == {"pathtype": "Container"}, (name, named)
            return [bool(self.is_dir(path))]
        var = path[4:]
        if name == "Test-Path":
            assert not named
            return [self.env_get(var) is not None]
        if name == "Get-Item":
            value = self.env_get(var)
            assert value is not None, f"Get-Item of a missing {var}"
            return [{"Name": var, "Value": value}]
        if name == "Set-Item":
            self.env_set(var, str(named.pop("value")))
            assert not named
            return []
        if name == "Remove-Item":
            assert self.env_get(var) is not None, f"Remove-Item of a missing {var}"
            self.env_set(var, None)
            return []
        raise AssertionError(f"cmdlet {name} outside the modelled subset")

    def expr(self, node: Node) -> Any:
        node = _unwrap(node)
        kind = node.type
        text = _text(node)
        if kind == "variable":
            return self.lookup(text[1:])
        if kind == "verbatim_string_characters":
            assert text[0] == text[-1] == "'"
            return text[1:-1].replace("''", "'")
        if kind == "decimal_integer_literal":
            return int(text)
        if kind == "parenthesized_expression":
            return self.value(node.named_children[0])
        if kind == "array_expression":
            out: list[Any] = []
            for part in node.named_children:
                self.statements(part, out)
            return out
        if kind == "hash_literal_expression":
            table: dict[str, Any] = {}
            for entry in _descendants(node, "hash_entry"):
                key, value = entry.named_children
                table[_text(key)] = self.value(value)
            return table
        if kind == "array_literal_expression":
            return [self.expr(c) for c in node.named_children]
        if kind.split("_")[0] in ("logical", "bitwise", "comparison", "additive"):
            return self.binary(node)
        if kind == "expression_with_unary_operator":
            op = node.children[0]
            if op.type == ",":
                return Wrapped([self.expr(node.named_children[0])])
            if op.type == "-not":
                return not _truthy(self.expr(node.named_children[0]))
            raise AssertionError(f"unary {op.type}")
        if kind == "cast_expression":
            type_node, operand = node.named_children
            return _cast(_text(type_node), self.expr(operand))
        if kind == "element_access":
            target, index = node.named_children
            return self.expr(target)[self.expr(index)]
        if kind == "member_access":
            target, member = node.named_children
            if target.type == "type_literal":
                return _static(_text(target), _text(member))
            return _member(self.expr(target), _text(member))
        if kind == "invokation_expression":
            target, member, arglist = node.named_children
            args = [self.expr(a) for a in _descendants(arglist, "argument_expression")]
            if target.type == "type_literal":
                return _static_call(_text(target), _text(member), args)
            return _method(self.expr(target), _text(member), args)
        raise AssertionError(f"expression {kind} outside the modelled subset: {text}")

    def binary(self, node: Node) -> Any:
        left_node, op_node, right_node = node.children
        op = _text(op_node).lower()
        left = self.expr(left_node)
        if op == "-and":
            return _truthy(left) and _truthy(self.expr(right_node))
        if op == "-or":
            return _truthy(left) or _truthy(self.expr(right_node))
        right = self.expr(right_node)
        if op == "+":
            if isinstance(left, str):
                return left + ("" if right is None else str(right))
            assert isinstance(left, int) and isinstance(right, int), (left, right)
            return left + right
        if op == "-":
            assert isinstance(left, int) and isinstance(right, int), (left, right)
            return left - right
        if op == "-join":
            return str(right).join("" if x is None else str(x) for x in _enumerate(left))
        if op == "-split":
            return re.split(right, left, flags=re.IGNORECASE)
        if op == "-match":
            assert isinstance(left, str)
            pattern = right.replace("\\z", "\\Z")  # .NET's end of input
            return re.search(pattern, left, flags=re.IGNORECASE) is not None
        assert not isinstance(left, list), f"{op} on an array filters it: not modelled"
        if left is not None and right is not None and not isinstance(left, type(right)):
            right = type(left)(right)
        if op in ("-ceq", "-cne", "-eq", "-ne"):
            if op in ("-eq", "-ne") and isinstance(left, str) and isinstance(right, str):
                left, right = left.lower(), right.lower()
            return (left == right) is (op in ("-ceq", "-eq"))
        compare = {"-lt": "__lt__", "-gt": "__gt__", "-ge": "__ge__", "-le": "__le__"}[op]
        return bool(getattr(left, compare)(right))


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8")


def _unwrap(node: Node) -> Node:
    while node.child_count == 1 and node.type not in ("variable", "command"):
        node = node.children[0]
    if node.type == "string_literal":
        return node.children[0]
    return node


def _descendants(node: Node, kind: str) -> list[Node]:
    found = []
    for child in node.named_children:
        if child.type == kind:
            found.append(child)
        else:
            found += _descendants(child, kind)
    return found


def _enumerate(value: Any) -> list[Any]:
    if value is None or value is VOID:
        return []
    if isinstance(value, list):
        return list(value)
    if isinstance(value, SortedDict):
        return value.pairs()
    return [value]


def _emit(value: Any, out: list[Any]) -> None:
    if value is VOID:
        return
    if isinstance(value, list) and not isinstance(value, NetList):
        out.extend(value)  # arrays unroll; a List[T] also does, but the script never emits one
    elif isinstance(value, NetList):
        raise AssertionError("the script emits a List[T] unwrapped: it would unroll")
    else:
        out.append(value)


def _collect(out: list[Any]) -> Any:
    if not out:
        return None
    return out[0] if len(out) == 1 else out


def _truthy(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value) and (len(value) > 1 or _truthy(value[0]))
    return bool(value)


class SortedDict(dict[str, Any]):
    def pairs(self) -> list[dict[str, Any]]:
        return [{"Key": k, "Value": self[k]} for k in sorted(self)]


def _cast(type_text: str, value: Any) -> Any:
    if type_text == "[void]":
        return VOID
    if type_text == "[int]":
        return int(value or 0)
    if type_text == "[string]":
        return "" if value is None else str(value)
    if type_text == "[string[]]":
        return ["" if v is None else str(v) for v in _enumerate(value)]
    raise AssertionError(f"cast {type_text}")


def _static(type_text: str, member: str) -> Any:
    known = {
        ("[System.StringComparison]", "Ordinal"),
        ("[System.StringComparer]", "Ordinal"),
        ("[System.StringSplitOptions]", "None"),
    }
    assert (type_text, member) in known, (type_text, member)
    return member


def _static_call(type_text: str, member: str, args: list[Any]) -> Any:
    if type_text == "[string]" and member == "IsNullOrEmpty":
        return not args[0]
    assert member == "new", (type_text, member)
    if type_text in (
        "[System.Collections.Generic.List[string]]",
        "[System.Collections.Generic.List[int]]",
    ):
        assert args == []
        return NetList()
    if type_text == "[System.Collections.Generic.SortedDictionary[string, object]]":
        assert args == ["Ordinal"]
        return SortedDict()
    raise AssertionError(f"{type_text}::{member}")


def _net_str(value: Any) -> str:
    # PowerShell passes $null to a .NET string parameter as ''
    return "" if value is None else str(value)


def _member(target: Any, member: str) -> Any:
    if isinstance(target, str) and member == "Length":
        return len(target)
    if isinstance(target, list) and member in ("Count", "Length"):
        return len(target)
    if isinstance(target, dict) and member in target:
        return target[member]
    raise AssertionError(f"member {member} of {type(target).__name__}")


def _method(target: Any, member: str, args: list[Any]) -> Any:
    if isinstance(target, str):
        if member in ("StartsWith", "EndsWith", "IndexOf"):
            needle, comparison = args
            assert comparison == "Ordinal"
            return {
                "StartsWith": target.startswith,
                "EndsWith": target.endswith,
                "IndexOf": target.find,
            }[member](_net_str(needle))
        if member == "Substring":
            start, length = [*args, None][:2]
            assert 0 <= start <= len(target)
            if length is None:
                return target[start:]
            assert 0 <= length <= len(target) - start
            return target[start : start + length]
        if member == "Split":
            separators, options = args
            assert options is None or options == "None"
            (separator,) = separators
            return target.split(separator)
        if member == "ToLowerInvariant":
            return target.lower()
    if isinstance(target, NetList):
        if member == "Add":
            target.append(args[0] if isinstance(args[0], int) else _net_str(args[0]))
            return VOID
        if member == "AddRange":
            target.extend(_enumerate(args[0]))
            return VOID
        if member == "Remove":
            if _net_str(args[0]) in target:
                target.remove(_net_str(args[0]))
                return True
            return False
        if member == "Insert":
            index, value = args
            assert 0 <= index <= len(target)
            target.insert(index, _net_str(value))
            return VOID
    if isinstance(target, SortedDict) and member == "GetEnumerator":
        return target.pairs()
    raise AssertionError(f"method {member} of {type(target).__name__}")


WIN_ENTRIES = [
    "C:\\Windows",
    "C:\\odd 'q' $x (x86)\\bin",
    "C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v10.0\\bin",
    "c:\\program files\\nvidia gpu computing toolkit\\cuda\\V11.2\\libnvvp\\",
    "C:\\TOOLS\\cuda\\bin",
    "D:\\other\\Library\\bin",
    "D:\\envs\\A\\library\\bin",
    "D:\\envs\\B\\Library\\bin\\",
    "",
]
WIN_DIRS_CASED = {"D:\\other\\conda-meta", "D:\\envs\\A\\conda-meta", "D:\\envs\\B\\conda-meta"}
WIN_DIRS = frozenset(d.lower() for d in WIN_DIRS_CASED)


def win_is_dir(path: str) -> bool:
    return path.lower() in WIN_DIRS  # Windows file names fold case


win_path = st.one_of(st.none(), st.lists(st.sampled_from(WIN_ENTRIES), max_size=7).map(";".join))
maybe = st.one_of(st.none(), st.sampled_from(["C:\\CUDA\\v10.0", "x", "1"]))


A_PREFIX, B_PREFIX = "D:\\envs\\A", "D:\\envs\\B"
WIN_PLANS = {
    A_PREFIX: plan_for(load_catalog().combo(WINDOWS_COMBOS[0]), "win-64"),
    B_PREFIX: plan_for(load_catalog().combo(WINDOWS_COMBOS[-1]), "win-64"),
}
Runner = Any


def model_runner(edit: tuple[str, str] = ("", "")) -> Runner:
    """The .ps1 scripts of WIN_PLANS run by the model (``edit``: a text replacement in them)."""
    sources = {}
    for prefix, plan in WIN_PLANS.items():
        for phase in ("activate", "deactivate"):
            content = render_script(plan, "ps1", phase).content
            assert edit[0] in content
            sources[prefix, phase] = content.replace(*edit)

    def run(prefix: str, phase: str, env: dict[str, str]) -> dict[str, str]:
        return PsModel(env, win_is_dir).run(sources[prefix, phase])

    return run


def reference_run(prefix: str, phase: str, env: dict[str, str]) -> dict[str, str]:
    plan = WIN_PLANS[prefix].runtime()
    if phase == "activate":
        changes = CORE["envfactory_activate"](env, plan, win_is_dir)
    else:
        changes = CORE["envfactory_deactivate"](env, plan)
    out = dict(env)
    for name, value in changes.items():
        out.pop(name, None)
        if value:  # PowerShell cannot hold '': the variable is unset instead
            out[name] = value
    return out


def start_env(path: str | None, cuda: str | None, cuda_v: str | None, level: str | None) -> Env:
    env = {"USER_KEEP": "1"}
    for name, value in (
        ("PATH", path),
        ("CUDA_PATH", cuda),
        ("CUDA_PATH_V10_0", cuda_v),
        ("TF_CPP_MIN_LOG_LEVEL", level),
    ):
        if value:
            env[name] = value
    return env


def session_mismatch(run: Runner, env: Env) -> str | None:
    """Activate A twice, edit PATH, stack B, deactivate B then A; the first step where the
    model's result differs from the reference's (or the model refuses), else None."""
    steps: list[tuple[str, str, Env]] = [
        (A_PREFIX, "activate", {"CONDA_PREFIX": A_PREFIX, "CONDA_SHLVL": "1"}),
        (A_PREFIX, "activate", {}),  # activating twice
        (A_PREFIX, "user", {}),
        (B_PREFIX, "activate", {"CONDA_PREFIX": B_PREFIX, "CONDA_SHLVL": "2"}),  # stacked
        (B_PREFIX, "deactivate", {}),
        (B_PREFIX, "user", {"CONDA_PREFIX": A_PREFIX, "CONDA_SHLVL": "1"}),
        (A_PREFIX, "deactivate", {}),
    ]
    for prefix, phase, edits in steps:
        env = env | edits
        if phase == "user":
            env["PATH"] = "C:\\mine;" + env.get("PATH", "")
            continue
        expected = reference_run(prefix, phase, env)
        try:
            got = run(prefix, phase, env)
        except AssertionError as exc:
            return f"{phase} {prefix}: the model refused: {exc}"
        if got != expected:
            return f"{phase} {prefix} on {env}: {got} != {expected}"
        env = expected
    assert not [k for k in env if k.startswith(STATE_PREFIX)]
    return None


MODEL = model_runner()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=win_path, cuda=maybe, cuda_v=maybe, level=maybe)
def test_the_ps1_logic_matches_the_reference_step_by_step(
    path: str | None, cuda: str | None, cuda_v: str | None, level: str | None
) -> None:
    assert session_mismatch(MODEL, start_env(path, cuda, cuda_v, level)) is None


CUDA = "C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v10.0"
FIXED_STARTS = [
    start_env(
        f"C:\\Windows;{CUDA}\\bin;C:\\Windows;c:\\TOOLS\\cuda\\bin\\;C:\\x", CUDA, CUDA, None
    ),
    start_env(f"{CUDA}\\bin;C:\\Windows;{CUDA}\\libnvvp;C:\\Windows;C:\\Windows", None, None, "0"),
    start_env("D:\\envs\\a\\library\\bin;D:\\other\\Library\\bin\\;C:\\x", None, None, None),
    start_env(f"{CUDA}\\bin;C:\\Windows;C:\\WINDOWS", None, None, None),
]
MUTATIONS = {
    "anchor counted from the front": ("$j = $follower + 1", "$j = $follower"),
    "own env compared case-sensitively": (
        "(_efy_fold $base) -ceq (_efy_fold $own)",
        "$base -ceq $own",
    ),
    "inserted after the anchor": ("$at = $j\n", "$at = $j + 1\n"),
    "new value given back": ("(_efy_get ($base + 'OLD'))", "(_efy_get ($base + 'NEW'))"),
    "paths compared case-sensitively": ("return $Text.ToLowerInvariant()", "return $Text"),
    "a state name misspelt": (
        "($base + 'ANCHOR_' + $i) $anchor",
        "($base + 'ANCHR_' + $i) $anchor",
    ),
    "a List[T] unrolled": ("return ,$out", "return $out"),
    "-eq instead of -ceq": ("if ($entries[$j] -ceq $anchor) {", "if ($entries[$j] -eq $anchor) {"),
}


def test_the_session_model_passes_the_fixed_starts() -> None:
    assert [session_mismatch(MODEL, env) for env in FIXED_STARTS] == [None] * len(FIXED_STARTS)


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_model_catches_a_broken_algorithm(mutation: str) -> None:
    run = model_runner(MUTATIONS[mutation])
    assert any(session_mismatch(run, env) for env in FIXED_STARTS), mutation
