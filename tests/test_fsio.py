"""Atomic writes: files get the mode the umask gives (not mkstemp's 0600), a writer killed with
SIGKILL leaves temporaries that the next write into the directory removes, and a live writer's
temporaries are left alone."""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envfactory.fsio import atomic_write, atomic_write_many, remove_stale_temporaries

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="umask and SIGKILL are POSIX")


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@posix_only
def test_files_and_directories_get_the_modes_of_the_umask(tmp_path: Path, umask: None) -> None:
    atomic_write_many([(tmp_path / "a" / "b" / "f.txt", "x"), (tmp_path / "g.bin", b"\x00")])
    assert mode(tmp_path / "a" / "b" / "f.txt") == 0o644
    assert mode(tmp_path / "g.bin") == 0o644
    assert mode(tmp_path / "a") == 0o755 and mode(tmp_path / "a" / "b") == 0o755
    os.umask(0o077)
    atomic_write(tmp_path / "private.txt", "y")
    assert mode(tmp_path / "private.txt") == 0o600


def test_contents_and_no_temporaries_left(tmp_path: Path) -> None:
    atomic_write_many([(tmp_path / "one", "1\n"), (tmp_path / "two", "ü\n")])
    atomic_write(tmp_path / "one", "uno\n")
    assert (tmp_path / "one").read_text() == "uno\n"
    assert (tmp_path / "two").read_bytes() == "ü\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]


def test_a_failure_while_writing_replaces_nothing(tmp_path: Path) -> None:
    (tmp_path / "kept").write_text("old")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OSError):  # its directory cannot be made: a file is in the way
        atomic_write_many([(tmp_path / "kept", "new"), (tmp_path / "a-file" / "x", "x")])
    assert (tmp_path / "kept").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "kept"]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@posix_only
def test_temporaries_of_a_dead_writer_go_those_of_a_live_one_stay(tmp_path: Path) -> None:
    dead = tmp_path / f".conda-lock.yml.{_dead_pid()}-0123abcd.tmp"
    live = tmp_path / f".conda-lock.yml.{os.getpid()}-89abcdef.tmp"
    old_style = tmp_path / ".conda-linux-64.lock.k3j_x9q2.tmp"  # mkstemp's, from before
    unrelated = tmp_path / ".notes.tmp"
    for path in (dead, live, old_style, unrelated):
        path.write_text("partial")
    long_ago = time.time() - 3600
    os.utime(old_style, (long_ago, long_ago))
    removed = remove_stale_temporaries(tmp_path)
    assert sorted(removed) == sorted([dead, old_style])
    assert live.exists() and unrelated.exists()


WRITER = """
import sys
from pathlib import Path
from envfactory.fsio import atomic_write_many
directory = Path(sys.argv[1])
payload = "x" * 4_000_000
while True:
    atomic_write_many([(directory / f"file{i}.txt", payload) for i in range(8)])
"""


@posix_only
def test_kill_9_at_random_points_then_the_next_write_leaves_no_temporary(tmp_path: Path) -> None:
    """A writer killed with SIGKILL mid-write leaves ``.*.tmp``; the next write cleans them."""
    rng = random.Random(11)
    left_behind = 0
    for _ in range(5):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)])
        time.sleep(0.3 + rng.random() * 0.7)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        left_behind += len(list(tmp_path.glob(".*.tmp")))
        atomic_write(tmp_path / "file0.txt", "after\n")
        assert list(tmp_path.glob(".*.tmp")) == []
        assert (tmp_path / "file0.txt").read_text() == "after\n"
    # the test kills while writing at least once (else it shows nothing)
    assert left_behind > 0
