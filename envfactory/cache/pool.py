"""The worker processes that fill cache entries: a bounded pool (about the core count:
extraction is CPU-bound, and rattler's extractor holds the GIL, so processes, not threads).

On a failure or an interrupt the queued work is cancelled and the running work waited for before
``fill`` returns, so nothing writes into the cache's staging directories afterwards. A worker
ignores SIGINT (the create handles it and waits), and ends when the create that started it is
gone (kill -9); its staging directory is then removed by the next run. The pool's start-up is
made atomic against interrupts (``staging.interrupts_deferred``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from envfactory import host
from envfactory.cache import fetch, unpack
from envfactory.cache.fetch import OfflineError
from envfactory.cache.layout import CacheLocation, Outcome, Wanted
from envfactory.cache.pathcheck import UnsafePackage
from envfactory.cache.staging import interrupts_deferred
from envfactory.errors import SystemFailure, ToolError, UserInputError


def workers() -> int:
    """About the core count: extraction is CPU-bound (bzip2, zstd)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def fill(
    location: CacheLocation,
    indices: Sequence[int],
    packages: Sequence[Wanted],
    landed: Callable[[int, Outcome, int], None],
    transferred: Callable[[int], None] | None = None,
) -> None:
    """Fill (``fetch.populate``) the entries of ``packages[i]`` for each index in worker processes;
    ``landed(i, outcome, size)`` runs here as each one finishes, ``transferred(nbytes)``
    a few times a second while the workers download."""
    from concurrent.futures import FIRST_COMPLETED, Executor, wait

    # Only these are preloaded: the default would import __main__ (the CLI) again; the
    # second quiets the traceback of a worker forked for a create killed meanwhile.
    context = host.pool_context(["envfactory.cache.pool", "envfactory.cache.orphaned"])
    downloaded = host.shared_counter(context) if transferred is not None else None
    reported = 0
    pool: Executor | None = None
    try:
        # all of the pool's workers start, or none do; a signal that came meanwhile is
        # raised as the block ends, where the pool is shut down below like any failure
        with interrupts_deferred():
            pool = host.worker_pool(
                min(workers(), len(indices)),
                context,
                (worker_init, (os.getpid(), downloaded)),
                (fetch.count_downloads, (downloaded,)),
            )
            with _main_not_reimported():
                pending = {pool.submit(_fill_one, location, packages[i]): i for i in indices}
        while pending:
            # with a listener, wake up 4 times a second to tell it the bytes downloaded
            tick = 0.25 if downloaded is not None else None
            finished, _ = wait(pending, timeout=tick, return_when=FIRST_COMPLETED)
            if transferred is not None and downloaded is not None:
                now = downloaded.value
                if now > reported:
                    transferred(now - reported)
                    reported = now
            for future in finished:
                i = pending.pop(future)
                error = future.exception()
                if error is not None:
                    raise ToolError(f"a package cache worker failed: {error}") from None
                result = future.result()
                if len(result) == 3:
                    raise _error_from(result)
                landed(i, result[0], result[1])
    except BaseException:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


@contextlib.contextmanager
def _main_not_reimported() -> Iterator[None]:
    """While workers start: a ``__main__`` run as a script is not named to them, so they do not
    run it again (multiprocessing re-imports it in every worker, which runs a script without an
    ``if __name__ == "__main__"`` guard once more; the workers need nothing from it)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def worker_init(parent: int, downloaded: Any = None) -> None:
    """A worker's start: SIGINT left to the create, which waits for it; ends with the create."""
    fetch.count_downloads(downloaded)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles it and waits for us
    # started with them blocked (interrupts_deferred): SIGTERM and SIGHUP end a worker again
    host.unblock_interrupts()
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()


def _exit_with(parent: int) -> None:
    """End this worker when the create that started it is gone (kill -9): the worker is the
    forkserver's child, not the create's, and would otherwise wait for work for ever, holding
    the create's stdout and stderr open (whoever reads them would wait as long). A staging
    directory it leaves is removed by the next run (its marker's flock dies with it)."""
    host.wait_for_exit(parent)
    os._exit(1)


def _error_from(result: tuple[str, str, str | None]) -> Exception:
    kind, message, hint = result
    cls: type[Exception] = {
        "UnsafePackage": UnsafePackage,
        "OfflineError": OfflineError,
        "UserInputError": UserInputError,
        "SystemFailure": SystemFailure,
        "ArchiveTooLarge": unpack.ArchiveTooLarge,
    }.get(kind, ToolError)
    return cls(message, hint)


def _fill_one(
    location: CacheLocation, pkg: Wanted
) -> tuple[Outcome, int] | tuple[str, str, str | None]:
    """In a worker process: fill one entry (``fetch.populate``). Errors come back as
    (class name, message, hint): the error classes take a hint that pickling would drop."""
    from envfactory.errors import EnvfactoryError

    try:
        return fetch.populate(location, pkg)
    except EnvfactoryError as exc:
        return (type(exc).__name__, exc.message, exc.hint)
