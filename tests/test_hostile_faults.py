"""Faults during ``lock`` (issue 10, rows 8 and 12, item 11): a full disk and a read-only one
(small tmpfs mounts in a private user+mount namespace: ``unshare -rm``, no root needed), kill -9
at random points and inside the write phase, and two ``lock`` runs at once. After each: exit 2
with ``error:`` + ``hint:`` for the machine's refusals, no traceback, nothing outside the output
directory changed, ``lock --check`` never calls a mixed set of lock files fresh, and a re-run
succeeds and leaves no temporary files behind."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
NAME = "tf114-cuda100"
LOCK_FILES = ("conda-lock.yml", "conda-linux-64.lock")

pytestmark = pytest.mark.slow


def lock_argv(channels: dict[str, Path], wheels: Path, out: Path, *extra: str) -> list[str]:
    return [
        ENVFACTORY, "lock", NAME, "-p", "linux-64", "-o", str(out),
        "--channel-map", f"defaults={channels['defaults']}", "--pip-index", str(wheels), *extra,
    ]  # fmt: skip


def userns() -> bool:
    if shutil.which("unshare") is None:
        return False
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt 2>/dev/null || "
         "mount -t tmpfs tmpfs /tmp"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    return proc.returncode == 0


NEEDS_USERNS = pytest.mark.skipif(
    not userns(), reason="no user+mount namespaces here (unshare -rm): cannot mount a small tmpfs"
)


def in_namespace(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "-rm", "bash", "-euc", script],
        capture_output=True, text=True, timeout=600, cwd=cwd, check=False,
    )  # fmt: skip


def q(path: Path | str) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def outcome(log: Path) -> tuple[int, str]:
    rc, _, stderr = log.read_text().partition("\n")
    return int(rc), stderr


def assert_system_failure(rc: int, stderr: str, *fragments: str) -> None:
    assert rc == 2, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    hints = [line for line in stderr.splitlines() if line.startswith("hint: ")]
    assert len(errors) == 1 and len(hints) == 1, stderr
    for fragment in fragments:
        assert fragment in stderr, stderr


def step(name: str, argv: list[str], logs: Path) -> str:
    """A shell line that runs ``argv`` and records its exit code and stderr in logs/NAME."""
    command = " ".join(q(a) for a in argv)
    log = logs / name
    return f"set +e; {command} 2>{q(log)}.err >/dev/null; echo $? > {q(log)}; " \
           f"cat {q(log)}.err >> {q(log)}; set -e\n"  # fmt: skip


@NEEDS_USERNS
def test_lock_on_a_full_disk(test_channels: dict[str, Path], tmp_path: Path) -> None:
    out, logs = tmp_path / "locks", tmp_path / "logs"
    out.mkdir()
    logs.mkdir()
    argv = lock_argv(test_channels, test_channels["wheels"], out)
    script = (
        f"mount -t tmpfs -o size=12k tmpfs {q(out)}\n"
        + step("full", argv, logs)
        + f"find {q(out)} -type f > {q(logs / 'files')}\n"
        + f"mount -o remount,size=16m {q(out)}\n"
        + step("again", argv, logs)
        + step("check", [*argv, "--check"], logs)
        + f"find {q(out)} -name '*.tmp' > {q(logs / 'leftovers')}\n"
    )
    proc = in_namespace(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_system_failure(*outcome(logs / "full"), "No space left on device", "free space")
    assert (logs / "files").read_text() == ""  # nothing half-written kept
    assert outcome(logs / "again")[0] == 0, outcome(logs / "again")[1]
    assert outcome(logs / "check")[0] == 0, outcome(logs / "check")[1]
    assert (logs / "leftovers").read_text() == ""


@NEEDS_USERNS
def test_lock_into_a_read_only_directory(test_channels: dict[str, Path], tmp_path: Path) -> None:
    out, logs = tmp_path / "locks", tmp_path / "logs"
    out.mkdir()
    logs.mkdir()
    wheels_b = tmp_path / "wheels-b"
    shutil.copytree(test_channels["wheels"], wheels_b)
    first = lock_argv(test_channels, test_channels["wheels"], out)
    second = lock_argv(test_channels, wheels_b, out)  # other inputs: every lock file changes
    script = (
        f"mount -t tmpfs -o size=16m tmpfs {q(out)}\n"
        + step("first", first, logs)
        + f"cat {q(out / NAME / 'conda-lock.yml')} > {q(logs / 'before')}\n"
        + f"mount -o remount,ro {q(out)}\n"
        + step("readonly", second, logs)
        + f"cat {q(out / NAME / 'conda-lock.yml')} > {q(logs / 'after')}\n"
        + f"mount -o remount,rw {q(out)}\n"
        + step("again", second, logs)
        + step("check", [*second, "--check"], logs)
    )
    proc = in_namespace(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert outcome(logs / "first")[0] == 0, outcome(logs / "first")[1]
    assert_system_failure(*outcome(logs / "readonly"), "Read-only file system", "mounted read-only")
    assert (logs / "before").read_text() == (logs / "after").read_text()  # the old lock stays
    assert outcome(logs / "again")[0] == 0
    assert outcome(logs / "check")[0] == 0


# --- kill -9 and concurrency -----------------------------------------------------------------


def which_set(directory: Path, marker_a: str, marker_b: str) -> dict[str, str]:
    """Each lock file: 'A' or 'B' (by the wheel folder its pip URLs name), or 'missing'."""
    out = {}
    for name in LOCK_FILES:
        path = directory / name
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        out[name] = "B" if marker_b in text else "A" if marker_a in text else "missing"
    return out


def snapshot_outside(root: Path, skip: Path) -> dict[str, float]:
    return {
        str(p): p.stat().st_mtime for p in root.rglob("*") if p.is_file() and skip not in p.parents
    }


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def kill_at(argv: list[str], out: Path, rng: random.Random, during_write: bool) -> None:
    """Start ``argv`` and SIGKILL it: at a random time of a whole run, or (``during_write``) a
    random 0-40 ms after its first temporary file appears in ``out``."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if during_write:
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                if any(p.name.endswith(".tmp") for p in out.rglob("*")):
                    time.sleep(rng.uniform(0, 0.04))
                    break
                time.sleep(0.0005)
        else:
            time.sleep(rng.uniform(0.2, 5.0))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)


@pytest.mark.parametrize("during_write", [False, True], ids=["anytime", "write-phase"])
def test_kill_9_during_lock(
    test_channels: dict[str, Path], tmp_path: Path, during_write: bool
) -> None:
    rng = random.Random(10 + during_write)  # fixed seeds: the same kill points every run
    out = tmp_path / "locks"
    wheels_b = tmp_path / "wheels-b"
    shutil.copytree(test_channels["wheels"], wheels_b)
    first = lock_argv(test_channels, test_channels["wheels"], out)
    second = lock_argv(test_channels, wheels_b, out)
    seen: list[dict[str, str]] = []
    for _ in range(3):
        assert run(first).returncode == 0
        before = snapshot_outside(tmp_path, out)
        kill_at(second, out, rng, during_write)
        state = which_set(out / NAME, str(test_channels["wheels"]), str(wheels_b))
        seen.append(state)
        check = run([*second, "--check"])
        assert "Traceback" not in check.stderr and "internal error" not in check.stderr
        fresh = set(state.values()) == {"B"}
        assert check.returncode == (0 if fresh else 1), (state, check.stderr)
        assert snapshot_outside(tmp_path, out) == before  # nothing outside the output changed
        again = run(second)
        assert again.returncode == 0, again.stderr
        assert run([*second, "--check"]).returncode == 0
        assert sorted(p.name for p in out.rglob("*.tmp")) == []
    print("lock file sets right after each kill:", seen)


def test_two_lock_runs_at_once(test_channels: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "locks"
    argv = lock_argv(test_channels, test_channels["wheels"], out)
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(p.wait(timeout=300), p.communicate()[1]) for p in procs]
    for rc, stderr in results:
        assert "Traceback" not in stderr and "internal error" not in stderr, stderr
        assert rc == 0 or (stderr.startswith("error: ") and "\nhint: " in stderr), stderr
    assert any(rc == 0 for rc, _ in results)
    check = run([*argv, "--check"])
    assert check.returncode == 0, check.stderr
    assert sorted(p.name for p in out.rglob("*.tmp")) == []
