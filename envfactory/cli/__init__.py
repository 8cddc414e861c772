"""The command line: each command parses options, calls one core function, prints the result.

This package is the only place that prints. Every ``EnvfactoryError`` is turned into an
``error:`` line plus a ``hint:`` line and its exit code here, in one funnel (``run``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import typer

try:  # typer >= 0.22 ships its own copy of click; older releases use click itself
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_errors  # type: ignore[no-redef]

from envfactory import __version__
from envfactory.cli.output import (
    NORMAL,
    print_error,
    print_json_error,
    set_level,
    tolerant_streams,
)
from envfactory.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_TOOL_FAILURE,
    EnvfactoryError,
    from_os_error,
)

# Each top-level command and the module of envfactory.cli that defines it. A command line that
# names one builds only that command: imports its module and has typer turn that one function
# into a click command (for all 15 commands that took ~10 ms of every start, benchmarks/
# bench_cli.py; for the four of lock_cmds, 2 ms of a warm create's 0.3 s).
# Anything else -- --help, a bare 'envfactory', --version, a mistyped name -- builds them all, so
# the help lists every command and click can suggest the right one. tests/test_cli_registry.py
# holds this table to what the modules register and each command's help to the full build's.
COMMANDS: dict[str, str] = {
    "list": "catalog_cmds",
    "show": "catalog_cmds",
    "render": "catalog_cmds",
    "lock": "lock_cmds",
    "create": "lock_cmds",
    "verify": "lock_cmds",
    "cache": "lock_cmds",
    "diff": "diff_cmds",
    "mirror": "project_cmds",
    "kernel": "project_cmds",
    "audit": "diagnose_cmds",
    "compat": "diagnose_cmds",
    "doctor": "diagnose_cmds",
    "explain": "diagnose_cmds",
    "recommend": "diagnose_cmds",
}
MODULES = tuple(dict.fromkeys(COMMANDS.values()))  # in the order of their first command

HELP = (
    "Reproducible GPU deep-learning conda environments.\n\n"
    "A catalog of TensorFlow/CUDA/cuDNN/Python combos (every fact with its source) is rendered "
    "into environment files, solved into per-platform lockfiles, rebuilt into identical "
    "environments with activation scripts that keep foreign CUDA installs off PATH, and "
    "checked against a machine's GPU and driver.\n\n"
    "Exit codes: 0 ok, 1 bad input, 2 solver or tool failure, 3 problems found."
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"envfactory {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """Reproducible GPU deep-learning conda environments."""


def build_app(modules: Sequence[str] = MODULES, only: str | None = None) -> typer.Typer:
    """The typer app with the commands of ``modules`` (names in ``MODULES``), in that order;
    with ``only``, just that command (or group) of them."""
    import importlib

    app = typer.Typer(
        name="envfactory",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    for name in modules:
        importlib.import_module(f"envfactory.cli.{name}").register(app)
    if only is not None:
        app.registered_commands = [c for c in app.registered_commands if c.name == only]
        app.registered_groups = [
            g
            for g in app.registered_groups
            if g.typer_instance is not None and g.typer_instance.info.name == only
        ]
    return app


def modules_for(args: Sequence[str]) -> tuple[str, ...]:
    """The command modules a command line needs: the one defining the command it names first,
    or all of them when it names none (an option first, or an unknown word)."""
    if args and args[0] in COMMANDS:
        return (COMMANDS[args[0]],)
    return MODULES


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code; tests call this directly."""
    args = list(sys.argv[1:] if argv is None else argv)
    # Under --json an error is a JSON object on stdout, as conda prints one (conda/__init__.py,
    # CondaError.dump_map: "exception_name", "message", "error"); the exit code is the same.
    as_json = "--json" in args[: args.index("--")] if "--" in args else "--json" in args

    def fail(message: str, hint: str | None, code: int, kind: str) -> int:
        if as_json:
            print_json_error(message, hint, code, kind)
        else:
            print_error(message, hint)
        return code

    set_level(NORMAL)  # -q/-v of an earlier run() in the same process do not carry over
    try:
        modules = modules_for(args)
        only = args[0] if len(modules) == 1 else None  # the command it names
        command = typer.main.get_command(build_app(modules, only))
        result = command.main(args=args, prog_name="envfactory", standalone_mode=False)
    except EnvfactoryError as exc:
        return fail(exc.message, exc.hint, exc.exit_code, type(exc).__name__)
    except click_errors.NoArgsIsHelpError as exc:
        # Click's help for a bare group or command; not an error.
        sys.stdout.write((exc.ctx.get_help() if exc.ctx else "") + "\n")
        return EXIT_OK
    except click_errors.UsageError as exc:
        hint = "see 'envfactory --help'"
        if exc.ctx is not None:
            hint = f"see '{exc.ctx.command_path} --help'"
        return fail(exc.format_message(), hint, EXIT_BAD_INPUT, "UsageError")
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        return fail("interrupted", None, 130, "KeyboardInterrupt")
    except OSError as exc:  # disk full, read-only, permission: the machine's answer, exit 2
        failure = from_os_error(exc)
        return fail(failure.message, failure.hint, failure.exit_code, type(failure).__name__)
    except UnicodeEncodeError as exc:  # output, not input: the file is fine
        return fail(
            f"cannot write {exc.object[exc.start : exc.end]!r} in the {exc.encoding} encoding",
            "run with PYTHONIOENCODING=utf-8 (or 'chcp 65001' in the console)",
            EXIT_TOOL_FAILURE,
            "UnicodeEncodeError",
        )
    except UnicodeError as exc:
        return fail(
            f"input is not valid text: {exc}",
            "save the file (or input) as UTF-8",
            EXIT_BAD_INPUT,
            "UnicodeError",
        )
    except (RecursionError, MemoryError) as exc:
        return fail(
            f"the input is too large or too deeply nested ({type(exc).__name__})",
            "check the file you passed; envfactory writes nothing this deep",
            EXIT_TOOL_FAILURE,
            type(exc).__name__,
        )
    except Exception as exc:
        # A bug of ours. The user still gets the error/hint pair the issue promises; the
        # traceback is one variable away for the report.
        if os.environ.get("ENVFACTORY_TRACEBACK"):
            raise
        return fail(
            f"internal error: {type(exc).__name__}: {exc}",
            "this is a bug in envfactory; run again with ENVFACTORY_TRACEBACK=1 and report "
            "the traceback with the command line",
            EXIT_TOOL_FAILURE,
            "InternalError",
        )
    return int(result) if isinstance(result, int) else EXIT_OK


def main() -> None:
    """Console-script entry point.

    Ends with ``os._exit``: py-rattler 0.28 can crash at interpreter shutdown after a solve
    (SIGSEGV or SIGABRT, "PyGILState_Release ... runtime state: finalizing", in about 1-5 % of
    short-lived processes, after all output was written); all output is flushed first.
    """
    tolerant_streams()
    code = run()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
