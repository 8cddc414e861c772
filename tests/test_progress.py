"""Progress as a user sees it: on a terminal a bar with bytes and rate for every download
(create's package cache, mirror), elsewhere one line per phase (one per file under -v), and
nothing under -q. Real downloads from a local HTTP server, a real pseudo-terminal."""

from __future__ import annotations

import functools
import os
import pty
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from crafted import Crafted, crafted_lock
from factories import lock_file

ENVFACTORY = str(Path(sys.executable).with_name("envfactory"))
SIZE = 300_000  # bytes of each package's one file: several download chunks


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served_lock(tmp_path: Path) -> Iterator[Path]:
    """A lock of 6 packages whose URLs are http:// ones of a server on this machine."""
    packages = [
        Crafted(f"dl{i}", files={f"share/dl{i}/blob.bin": os.urandom(SIZE)}) for i in range(6)
    ]
    lock = crafted_lock(tmp_path / "src", packages)
    channel = tmp_path / "src" / "channel"
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(channel)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    text = lock.read_text().replace(channel.resolve().as_uri(), url)
    assert text.count(url) >= 6
    lock.write_text(text)
    yield lock
    httpd.shutdown()
    httpd.server_close()


def create(lock: Path, prefix: Path, cache: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVFACTORY, "create", "-f", str(lock), "-p", str(prefix), "--platform", "linux-64",
         *flags],
        env={**os.environ, "ENVFACTORY_PKGS_DIRS": str(cache)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


# a caveat about the result, not progress: -q keeps it (crafted locks name no combo)
NOTE = "note: the lock names no envfactory combo; no activation scripts installed"
PHASES = [
    r"creating .*/env from .*conda-lock\.yml",
    r"  6 conda packages: checking them into the cache .*",
    r"  linking 6 conda packages \(0 were cached already\)",
    r"  created .*/env",
    NOTE,
]


def test_without_a_terminal_one_line_per_phase(served_lock: Path, tmp_path: Path) -> None:
    proc = create(served_lock, tmp_path / "env", tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == len(PHASES), lines
    for line, phase in zip(lines, PHASES, strict=True):
        assert re.fullmatch(phase, line), (line, phase)


def test_verbose_says_each_package_and_the_bytes(served_lock: Path, tmp_path: Path) -> None:
    proc = create(served_lock, tmp_path / "env", tmp_path / "cache", "-v")
    assert proc.returncode == 0, proc.stderr
    per_package = [line for line in proc.stderr.splitlines() if re.match(r"  \[\d/6\] ", line)]
    assert sorted(re.sub(r":.*", "", line)[-3:] for line in per_package) == [
        f"dl{i}" for i in range(6)
    ]
    assert all(": downloaded, " in line for line in per_package), per_package
    summary = re.search(r"packages: downloaded ([\d.]+) (KiB|MiB) in [\d.]+ s \([\d.]+ \w+/s\)",
                        proc.stderr)  # fmt: skip
    assert summary, proc.stderr
    # every byte of the six archives, counted in the cache's worker processes (shown to 0.1)
    archives = sum(p.stat().st_size for p in served_lock.parent.parent.glob("channel/*/*.bz2"))
    unit = 1024 if summary[2] == "KiB" else 1024 * 1024
    assert abs(float(summary[1]) * unit - archives) <= 0.05 * unit, (summary[0], archives)


def test_quiet_prints_only_the_result(served_lock: Path, tmp_path: Path) -> None:
    proc = create(served_lock, tmp_path / "env", tmp_path / "cache", "-q")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == NOTE + "\n"
    assert proc.stdout.startswith(f"created {tmp_path / 'env'} (linux-64): 6 conda")


def test_a_terminal_gets_a_bar_with_bytes_and_rate(served_lock: Path, tmp_path: Path) -> None:
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [ENVFACTORY, "create", "-f", str(served_lock), "-p", str(tmp_path / "env"),
         "--platform", "linux-64"],
        env={**os.environ, "ENVFACTORY_PKGS_DIRS": str(tmp_path / "cache"), "COLUMNS": "200"},
        stdout=subprocess.DEVNULL, stderr=child,
    )  # fmt: skip
    os.close(child)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=300)
    os.close(main)
    assert proc.returncode == 0, seen.decode(errors="replace")
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode(errors="replace"))
    bar = r"packages .* 6/6 +[\d.]+ (KiB|MiB) at [\d.]+ (B|KiB|MiB|GiB)/s"
    assert re.search(bar, screen), screen


class Recorder:
    """A ``progress.Transfer`` that keeps what it is told (the CLI's draws it)."""

    def __init__(self) -> None:
        self.total = 0
        self.nbytes = 0
        self.files: list[tuple[str, int, str]] = []
        self.waits: list[str] = []

    def start(self, total: int) -> None:
        self.total = total

    def transferred(self, nbytes: int) -> None:
        self.nbytes += nbytes

    def fetched(self, name: str, nbytes: int, outcome: str) -> None:
        self.files.append((name, nbytes, outcome))

    def waiting(self, message: str) -> None:
        self.waits.append(message)


def test_the_pip_files_report_their_bytes_too(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    """create's pip half (26pip's pipside) through the same interface: every wheel once, the
    bytes that came over HTTP, and no per-file lines in the phases."""
    from envfactory.cache.pkgcache import CacheLocation, PackageCache
    from envfactory.install.create import create_environment

    www = tmp_path / "www"
    shutil.copytree(test_channels["wheels"], www / "wheels")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(www)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    lock = lock_file(test_channels, "tf114-cuda100", tmp_path / "locks", platforms=["linux-64"])
    lock.write_text(
        lock.read_text().replace(test_channels["wheels"].resolve().as_uri(), f"{url}/wheels")
    )
    pip = Recorder()
    phases: list[str] = []
    try:
        result = create_environment(
            lock, tmp_path / "env", platform="linux-64", progress=phases.append,
            cache=PackageCache(CacheLocation(tmp_path / "cache")), pip_transfer=pip,
        )  # fmt: skip
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert result.pip == pip.total == len(pip.files) == 23
    assert {outcome for _, _, outcome in pip.files} == {"downloaded"}
    served = {p.name: p.stat().st_size for p in (www / "wheels").iterdir()}
    assert {name: size for name, size, _ in pip.files} == {n: served[n] for n, *_ in pip.files}
    assert pip.nbytes == result.pip_downloaded == sum(size for _, size, _ in pip.files)
    assert not [line for line in phases if line.startswith("downloaded ")]
