"""The command table of envfactory.cli (COMMANDS): a command line that names a command builds only
the module defining it, so the table must say exactly what each module registers, and a command
must read and behave the same whether it was built alone or with all the others."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest
import typer

from envfactory import cli


def command_names(modules: tuple[str, ...]) -> list[str]:
    group = typer.main.get_command(cli.build_app(modules))
    assert isinstance(group, typer.core.TyperGroup)
    return list(group.commands)


def test_the_table_names_every_command_with_the_module_that_registers_it() -> None:
    by_module = {module: command_names((module,)) for module in cli.MODULES}
    table = {name: module for module, names in by_module.items() for name in names}
    assert table == cli.COMMANDS
    # The full build is the modules' commands, nothing else, none twice (typer lists groups such
    # as 'cache' after the plain commands).
    full = command_names(cli.MODULES)
    assert sorted(full) == sorted(n for names in by_module.values() for n in names)
    assert len(set(full)) == len(full)


def test_a_command_line_builds_only_the_module_it_names() -> None:
    assert cli.modules_for(["render", "tf114-cuda100"]) == ("catalog_cmds",)
    assert cli.modules_for(["cache", "info"]) == ("lock_cmds",)
    assert cli.modules_for(["explain", "-"]) == ("diagnose_cmds",)
    for args in ([], ["--help"], ["--version"], ["rendr"], ["-h", "render"]):
        assert cli.modules_for(args) == cli.MODULES


def test_a_command_line_builds_only_the_command_it_names() -> None:
    """The module's other commands are not turned into click commands (cli.run passes the
    command's name as ``only``); a group such as 'cache' is kept whole."""
    assert command_names(("lock_cmds",)) == ["lock", "create", "verify", "cache"]
    for name in ("lock", "create", "verify", "cache"):
        group = typer.main.get_command(cli.build_app(("lock_cmds",), only=name))
        assert isinstance(group, typer.core.TyperGroup)
        assert list(group.commands) == [name]
    cache = typer.main.get_command(cli.build_app(("lock_cmds",), only="cache"))
    assert isinstance(cache, typer.core.TyperGroup)
    sub = cache.commands["cache"]
    assert isinstance(sub, typer.core.TyperGroup)
    assert sorted(sub.commands) == ["clean", "info"]


def run_full(args: list[str]) -> tuple[int, str, str]:
    """What ``args`` prints with every command built, as before the table existed."""
    out, err = io.StringIO(), io.StringIO()
    command = typer.main.get_command(cli.build_app())
    with redirect_stdout(out), redirect_stderr(err):
        try:
            command.main(args=args, prog_name="envfactory", standalone_mode=False)
            code = 0
        except typer.Exit as exc:
            code = int(exc.exit_code)
    return code, out.getvalue(), err.getvalue()


def run_lazy(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.run(args)
    return code, out.getvalue(), err.getvalue()


HELP_LINES = sorted(
    [[name, "--help"] for name in cli.COMMANDS]
    + [["cache", "info", "--help"]]
    + [["cache", "clean", "--help"]]
)


@pytest.mark.parametrize("args", HELP_LINES, ids=" ".join)
def test_a_commands_help_is_the_same_built_alone(args: list[str]) -> None:
    code, out, err = run_lazy(args)
    assert (code, err) == (0, "")
    assert out.startswith(f"Usage: envfactory {' '.join(args[:-1])} ")
    assert run_full(args) == (code, out, err)


def test_the_top_level_help_and_a_mistyped_command_see_every_command() -> None:
    code, out, _ = run_lazy(["--help"])
    assert code == 0
    listed = [line.split()[0] for line in out.split("Commands:\n", 1)[1].splitlines() if line]
    assert sorted(listed) == sorted(cli.COMMANDS)
    code, _, err = run_lazy(["rendr", "tf114-cuda100"])
    assert code == 1
    assert "No such command 'rendr'. Did you mean 'render'?" in err


@pytest.mark.parametrize("where", ["envfactory.cli", "envfactory.cli.catalog_cmds"])
def test_a_ctrl_c_while_the_cli_loads_is_one_line_not_a_traceback(where: str) -> None:
    """A Ctrl-C in the first ~0.1 s of a command lands while the CLI is imported (or its
    commands are built): exit 130 with one line, as later, not Python's traceback."""
    import subprocess
    import sys

    script = f"""
import sys
class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == {where!r}:
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupting())
from envfactory.__main__ import main
main()
"""
    proc = subprocess.run(
        [sys.executable, "-c", script, "list"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 130
    assert proc.stderr == "error: interrupted\n"
