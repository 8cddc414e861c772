"""The lock is one unit: conda-lock.yml is written last and records the digest of every other
file of the set, so ``lock --check`` calls a mixed set stale (a new conda-lock.yml beside an old
conda-<platform>.lock, or the reverse), also when a writer is killed with SIGKILL at a random
point. ``--check`` reads only the metadata block, without conda-lock; the files get the modes
the umask gives; a broken lock is an ``error:`` with a hint, never a traceback."""

from __future__ import annotations

import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envfactory.catalog.loader import load_catalog
from envfactory.errors import UserInputError
from envfactory.lockfile.read import read_lock_header
from envfactory.lockfile.record import file_digest
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LOCK_FILE, LockRequest, lock_combo, write_lock_set
from envfactory.solve.lockreview import check_lock

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
OLD_LOCK = Path(__file__).parent / "data" / "locks" / "envfactory-0.1-tf114-cuda100.conda-lock.yml"
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="umask and SIGKILL are POSIX")


def request_for(defaults: Path, wheels: Path) -> LockRequest:
    return LockRequest.for_combo(
        load_catalog().combo("tf114-cuda100"),
        platforms=("linux-64", "win-64"),
        channel_map=ChannelMap({"defaults": defaults.as_uri()}),
        pip_index=str(wheels),
    )


@pytest.fixture(scope="module")
def two_locks(
    test_channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[tuple[LockRequest, Path], tuple[LockRequest, Path]]]:
    """Two real locks of tf114-cuda100 whose files differ: B's channel is a copy of A's at
    another path, so its inputs and every package URL differ. Written under umask 022."""
    root = tmp_path_factory.mktemp("lock-set")
    moved = root / "moved-defaults"
    shutil.copytree(test_channels["defaults"], moved)
    old = os.umask(0o022)
    try:
        a = request_for(test_channels["defaults"], test_channels["wheels"])
        b = request_for(moved, test_channels["wheels"])
        lock_combo(a, root / "a")
        lock_combo(b, root / "b")
    finally:
        os.umask(old)
    yield (a, root / "a"), (b, root / "b")


def files_of(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_conda_lock_yml_records_every_other_file_of_the_set(
    two_locks: tuple[tuple[LockRequest, Path], tuple[LockRequest, Path]],
) -> None:
    (a, a_dir), _ = two_locks
    files = files_of(a_dir)
    recorded = read_lock_header(a_dir / LOCK_FILE).metadata.files
    assert set(recorded) == set(files) - {LOCK_FILE}
    assert {"conda-linux-64.lock", "conda-win-64.lock", "environment.linux-64.yml"} <= set(recorded)
    for name, digest in recorded.items():
        assert digest == file_digest(files[name]), name
    assert check_lock(a, a_dir).fresh


@posix_only
def test_lock_files_get_the_modes_of_the_umask(
    two_locks: tuple[tuple[LockRequest, Path], tuple[LockRequest, Path]],
) -> None:
    (_, a_dir), _ = two_locks
    for path in [a_dir, *a_dir.rglob("*")]:
        expected = 0o755 if path.is_dir() else 0o644
        assert stat.S_IMODE(path.stat().st_mode) == expected, path


def mixed(tmp_path: Path, base: Path, newer: Path, names: list[str]) -> Path:
    out = tmp_path / "mixed"
    shutil.copytree(base, out)
    for name in names:
        shutil.copy2(newer / name, out / name)
    return out


def test_a_new_conda_lock_yml_beside_an_old_explicit_lock_is_stale(
    two_locks: tuple[tuple[LockRequest, Path], tuple[LockRequest, Path]], tmp_path: Path
) -> None:
    """Issue 10, row 8: what a kill left before; its inputs match B, its explicit files are A's."""
    (_, a_dir), (b, b_dir) = two_locks
    assert check_lock(b, b_dir).fresh
    result = check_lock(b, mixed(tmp_path, a_dir, b_dir, [LOCK_FILE]))
    assert not result.fresh
    assert "conda-linux-64.lock is not the file this lock was written with" in result.reasons
    assert "conda-win-64.lock is not the file this lock was written with" in result.reasons


def test_new_explicit_locks_beside_the_old_conda_lock_yml_are_stale(
    two_locks: tuple[tuple[LockRequest, Path], tuple[LockRequest, Path]], tmp_path: Path
) -> None:
    """What a kill between the renames leaves now: some new files, the old conda-lock.yml."""
    (a, a_dir), (_, b_dir) = two_locks
    result = check_lock(a, mixed(tmp_path, a_dir, b_dir, ["conda-win-64.lock"]))
    assert result.reasons == ("conda-win-64.lock is not the file this lock was written with",)


def test_a_missing_file_of_the_set_is_stale(
    two_locks: tuple[tuple[LockRequest, Path], tuple[LockRequest, Path]], tmp_path: Path
) -> None:
    (a, a_dir), _ = two_locks
    copy = mixed(tmp_path, a_dir, a_dir, [])
    (copy / "environment.win-64.yml").unlink()
    assert check_lock(a, copy).reasons == ("environment.win-64.yml is missing",)


def test_crlf_line_endings_of_a_checkout_are_not_a_change(
    two_locks: tuple[tuple[LockRequest, Path], tuple[LockRequest, Path]], tmp_path: Path
) -> None:
    """git's core.autocrlf turns LF into CRLF on Windows checkouts: still the same lock."""
    (a, a_dir), _ = two_locks
    copy = mixed(tmp_path, a_dir, a_dir, [])
    for path in copy.rglob("*"):
        if path.is_file() and path.name != LOCK_FILE:
            data = path.read_bytes().replace(b"\r\n", b"\n")
            path.write_bytes(data.replace(b"\n", b"\r\n"))
    assert check_lock(a, copy).fresh


WRITER = """
import sys
from pathlib import Path
from envfactory.solve.lock import write_lock_set
target, *sources = map(Path, sys.argv[1:])
sets = []
for source in sources:
    names = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
    sets.append([(n, (source / n).read_bytes().decode("utf-8")) for n in names])
print("ready", flush=True)
while True:
    for files in sets:
        write_lock_set(target, files)
"""


@pytest.mark.slow
@posix_only
def test_kill_9_while_writing_never_leaves_a_set_that_checks_fresh_but_is_mixed(
    two_locks: tuple[tuple[LockRequest, Path], tuple[LockRequest, Path]], tmp_path: Path
) -> None:
    """A child rewrites the lock directory with A's set, then B's, over and over (the files
    handed over in name order, conda-lock.yml in the middle); it is killed with SIGKILL at
    random points. After each kill: a request the set checks fresh for has exactly its own
    files there, and the next write leaves no temporary behind."""
    (a, a_dir), (b, b_dir) = two_locks
    expected = {id(a): files_of(a_dir), id(b): files_of(b_dir)}
    target = tmp_path / "lock"
    shutil.copytree(a_dir, target)
    rng = random.Random(10)
    kinds = {"a": 0, "b": 0, "mixed": 0}
    temporaries = 0
    for _ in range(20):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(target), str(a_dir), str(b_dir)],
            stdout=subprocess.PIPE,
        )
        try:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
            time.sleep(0.05 + rng.random() * 0.4)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            if child.stdout is not None:
                child.stdout.close()
        temporaries += len(list(target.rglob(".*.tmp")))
        on_disk = {k: v for k, v in files_of(target).items() if not k.endswith(".tmp")}
        fresh = [r for r in (a, b) if check_lock(r, target).fresh]
        assert len(fresh) <= 1
        if fresh:
            assert on_disk == expected[id(fresh[0])]
            kinds["a" if fresh[0] is a else "b"] += 1
        else:
            kinds["mixed"] += 1
        # the next write (any lock run) removes what the killed one left
        write_lock_set(target, sorted((n, v.decode()) for n, v in expected[id(a)].items()))
        assert list(target.rglob(".*.tmp")) == []
        assert check_lock(a, target).fresh
    # the kills did land mid-write (most of a write is flushing the temporaries; a kill between
    # two renames is rarer, and shows as "mixed" here)
    assert temporaries > 0, kinds


def test_check_reads_the_package_list_without_conda_lock(
    two_locks: tuple[tuple[LockRequest, Path], tuple[LockRequest, Path]],
    test_channels: dict[str, Path],
    tmp_path: Path,
) -> None:
    """--check reads the package list (issue 28: a package appended by hand is reported, see
    tests/test_hostile_lock_author.py) with envfactory's own reader, never conda-lock's."""
    (_, a_dir), _ = two_locks
    copy = mixed(tmp_path, a_dir, a_dir, [])
    shutil.move(copy, tmp_path / "tf114-cuda100")
    code = (
        "import sys, json; from envfactory.cli import run; "
        "code = run(sys.argv[1:]); "
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'conda_lock', 'pydantic', 'rattler', 'jinja2', 'rich'}); "
        "print(json.dumps([code, heavy]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "lock", "tf114-cuda100", "--check", "--out", str(tmp_path),
         "--channel-map", f"defaults={test_channels['defaults']}",
         "--pip-index", str(test_channels["wheels"])],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.stdout.splitlines()[-1] == "[0, []]", proc.stdout + proc.stderr
    assert "is up to date" in proc.stdout


def test_a_lock_of_envfactory_0_1_has_no_digests_and_reads_as_stale(tmp_path: Path) -> None:
    shutil.copy(OLD_LOCK, tmp_path / LOCK_FILE)
    header = read_lock_header(tmp_path / LOCK_FILE)
    assert header.platforms == ("linux-64",) and header.metadata.files == {}
    assert header.metadata.combo == "tf114-cuda100"
    request = LockRequest.for_combo(load_catalog().combo("tf114-cuda100"), platforms=("linux-64",))
    reasons = check_lock(request, tmp_path).reasons
    assert any("records no digests of its other files" in r for r in reasons), reasons


@pytest.mark.slow
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"version: 1\npackage: []\n", "has no 'metadata' mapping"),
        (b"metadata: [1, 2]\n", "has no 'metadata' mapping"),
        (b"version: 1\nmetadata: {platforms: linux-64}\n", ":2: metadata.platforms"),
        (b"metadata:\n  platforms: [linux-64]\n  custom_metadata: {a: [1]}\n", "custom_metadata"),
        (b"metadata: {platforms: [\n", "not valid YAML"),
        (b"\xff\xfe m\x00e\x00", "is UTF-16 or UTF-32"),
        (b"metadata:\n  platforms: [linux-64]\n  x: \xe9\n", ":3: the lockfile is not UTF-8"),
        (b"metadata:\n  platforms: [../x]\n", "unknown platform '../x'"),
        (b"metadata:\n  platforms: [linux-64]\n  custom_metadata:\n"
         b"    envfactory.inputs.linux-64: '{not json'\n", "is not valid JSON"),
    ],
)  # fmt: skip
def test_a_broken_lock_is_an_error_with_a_hint(
    tmp_path: Path, content: bytes, message: str
) -> None:
    lock_dir = tmp_path / "locks" / "tf114-cuda100"
    lock_dir.mkdir(parents=True)
    (lock_dir / LOCK_FILE).write_bytes(content)
    with pytest.raises(UserInputError) as info:
        read_lock_header(lock_dir / LOCK_FILE)
    assert message in info.value.message and info.value.hint
    proc = subprocess.run(
        [ENVFACTORY, "lock", "tf114-cuda100", "--check"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and "\nhint: " in proc.stderr
    assert "Traceback" not in proc.stderr
