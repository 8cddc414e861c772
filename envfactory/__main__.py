"""The ``envfactory`` console script, and ``python -m envfactory``."""

from __future__ import annotations


def main() -> None:
    """Import the CLI with the cyclic garbage collector paused, then run it.

    Importing the CLI allocates tens of thousands of objects (modules, classes, functions) and
    frees almost none, so the collector's passes over them during the imports find nothing to
    collect; they cost ~10 ms of every command's start (benchmarks/bench_cli.py). After the
    imports the collector runs as usual, with what the imports made frozen out of its passes.
    """
    import gc
    import sys

    gc.disable()
    try:
        from envfactory import cli
    except KeyboardInterrupt:  # Ctrl-C while the CLI loads: nothing was started yet
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)
    finally:
        gc.enable()
    gc.freeze()
    cli.main()


if __name__ == "__main__":
    main()
