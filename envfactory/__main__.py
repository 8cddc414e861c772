"""The ``envfactory`` console script, and ``python -m envfactory``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType


GC_THRESHOLD = 100_000  # allocations between two passes of the cyclic collector (default 700)


def load_cli() -> ModuleType:
    """Import the CLI with the cyclic garbage collector paused, and return it.

    Importing the CLI allocates tens of thousands of objects (modules, classes, functions) and
    frees almost none, so the collector's passes over them during the imports find nothing to
    collect; they cost ~10 ms of every command's start (benchmarks/bench_cli.py). After the
    imports, what they made is frozen out of the collector's passes, and a pass comes every
    100,000 allocations instead of 700 (as mypy does): a command is one short process whose
    objects (parsed locks, directory listings, records) are not cycles, and the passes over
    them cost a warm create ~6 ms (the imports of rattler and of the build modules included).
    A Ctrl-C meanwhile ends the process with the CLI's own line and exit code (its
    ``print_error`` cannot be imported: it is what was being imported).
    """
    import gc
    import sys

    gc.disable()
    try:
        from envfactory import cli
    except KeyboardInterrupt:  # nothing was started yet
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)
    finally:
        gc.enable()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    return cli


def main() -> None:
    """The console script: the CLI, loaded by ``load_cli``."""
    load_cli().main()


if __name__ == "__main__":
    main()
