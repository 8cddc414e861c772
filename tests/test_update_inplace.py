"""``create --update`` changes an environment in place: only the packages that differ are unlinked
and linked, under a rollback journal; a failure, an interrupt or a kill -9 leaves (or gives back)
the old environment exactly.

The packages are real archives (tests/crafted.py), linked by the real rattler through the
real ``envfactory`` command; the kill -9 is tests/crashpoint (a SIGKILL between two system
calls of the update process). The same update with the real solver and a moving channel:
tests/test_relock.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from crafted import Crafted, write_crafted, write_lock
from shells.wine import WinePrefix

from envfactory.install.verify import verify_environment

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
CRASHPOINT = Path(__file__).parent / "crashpoint"


def py(version: str) -> Crafted:
    xy = ".".join(version.split(".")[:2])
    return Crafted(
        "python",
        version,
        files={f"bin/python{xy}": f"python {version}\n".encode(),
               f"lib/python{xy}/os.py": b"# os\n"},
    )  # fmt: skip


SIX = Crafted(
    "six",
    "1.16.0",
    build="py_0",
    subdir="noarch",
    files={"site-packages/six.py": b"# six 1.16.0\n"},
    index={"noarch": "python"},
)
KEEP = Crafted("keep", files={f"lib/keep/k{i}.so": f"keep {i}\n".encode() for i in range(5)})
OLD = Crafted(
    "old",
    files={"share/old/x.txt": b"old\n", "bin/oldtool": b"#!/bin/sh\n", "share/old/tool.py": b""},
)
NEW = Crafted("new", files={"share/new/y.txt": b"new\n"})


def many(version: str) -> Crafted:
    return Crafted(
        "many",
        version,
        files={f"lib/many/f{i:02d}.txt": f"{version} {i}\n".encode() for i in range(20)},
    )


def lock_of(tmp: Path, name: str, packages: list[Crafted]) -> Path:
    archives = {write_crafted(tmp / "channel", p): p for p in packages}
    return write_lock(tmp / "locks" / name, archives)


@pytest.fixture
def locks(tmp_path: Path) -> dict[str, Path]:
    """A: the environment as first created; B: one package changed (``many``), one removed
    (``old``), one added (``new``); C: python 3.7 -> 3.8, the rest as in A."""
    return {
        "A": lock_of(tmp_path, "a", [py("3.7.3"), SIX, KEEP, OLD, many("1.0")]),
        "B": lock_of(tmp_path, "b", [py("3.7.3"), SIX, KEEP, many("2.0"), NEW]),
        "C": lock_of(tmp_path, "c", [py("3.8.0"), SIX, KEEP, OLD, many("1.0")]),
    }


def envfactory(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVFACTORY, *args],
        env={**os.environ, "ENVFACTORY_PKGS_DIRS": str(tmp / "pkgs"), **env},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def create(tmp: Path, lock: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    prefix = tmp / "env"
    return envfactory(tmp, "create", str(lock), "-p", str(prefix), "--platform", "linux-64",
                      *extra, **env)  # fmt: skip


def snapshot(prefix: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry of the prefix: its kind, its inode (files) and its bytes (or link target)."""
    out = {}
    for path in sorted(prefix.rglob("*")):
        rel = path.relative_to(prefix).as_posix()
        if path.is_symlink():
            out[rel] = ("link", 0, str(path.readlink()).encode())
        elif path.is_dir():
            out[rel] = ("dir", 0, b"")
        else:
            out[rel] = ("file", path.stat().st_ino, path.read_bytes())
    return out


def test_an_update_in_place_links_only_what_differs(tmp_path: Path, locks: dict[str, Path]) -> None:
    assert create(tmp_path, locks["A"]).returncode == 0
    env = tmp_path / "env"
    # bytecode Python wrote for a module of the package the update removes (listed nowhere)
    (env / "share/old/__pycache__").mkdir()
    (env / "share/old/__pycache__/tool.cpython-37.pyc").write_bytes(b"pyc")
    before = snapshot(env)
    updated = create(tmp_path, locks["B"], "--update")
    assert updated.returncode == 0, updated.stderr
    assert "(3 conda packages kept, 2 linked)" in updated.stdout
    after = snapshot(env)
    # the kept packages' files are the same inodes: not linked again, not moved
    for rel in ["bin/python3.7", "lib/python3.7/site-packages/six.py", "lib/keep/k0.so"]:
        assert after[rel] == before[rel], rel
    # the changed package is the new one; the removed one is gone, with its directories
    assert after["lib/many/f00.txt"][2] == b"2.0 0\n"
    assert after["share/new/y.txt"][2] == b"new\n"
    assert not any(rel.startswith(("share/old", "bin/oldtool")) for rel in after)
    assert not any(".envfactory-update-" in rel for rel in after)  # no journal left
    assert verify_environment(env).identical
    assert json.loads((env / "conda-meta/envfactory.json").read_text())["lock"] == str(
        locks["B"].resolve()
    )


def test_a_python_change_relinks_the_noarch_python_packages(
    tmp_path: Path, locks: dict[str, Path]
) -> None:
    """The guard: a noarch: python package's files live under lib/pythonX.Y, so when python's
    X.Y moves it is linked anew for the new python, though the lock holds the same file."""
    assert create(tmp_path, locks["A"]).returncode == 0
    env = tmp_path / "env"
    keep = (env / "lib/keep/k0.so").stat().st_ino
    updated = create(tmp_path, locks["C"], "--update")
    assert updated.returncode == 0, updated.stderr
    assert "  ~ python 3.7.3 h0_0 -> 3.8.0 h0_0" in updated.stdout
    assert "(3 conda packages kept, 2 linked)" in updated.stdout  # python and six
    assert (env / "lib/python3.8/site-packages/six.py").read_bytes() == b"# six 1.16.0\n"
    assert not (env / "lib/python3.7").exists()  # emptied, so removed
    assert (env / "lib/keep/k0.so").stat().st_ino == keep
    assert verify_environment(env).identical


def test_a_record_that_lists_a_path_outside_the_prefix_changes_nothing(
    tmp_path: Path, locks: dict[str, Path]
) -> None:
    """The prefix is untrusted input: the record of a package the update removes names what
    the update moves away; one naming a path outside the prefix is refused before anything
    is moved."""
    assert create(tmp_path, locks["A"]).returncode == 0
    env = tmp_path / "env"
    outside = tmp_path / "precious.txt"
    outside.write_text("mine\n")
    record = env / "conda-meta/old-1.0-h0_0.json"
    doc = json.loads(record.read_text())
    doc["paths_data"]["paths"].append({"_path": "../precious.txt", "path_type": "hardlink"})
    record.write_text(json.dumps(doc))
    before = snapshot(env)
    refused = create(tmp_path, locks["B"], "--update")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "conda-meta/old-1.0-h0_0.json" in refused.stderr
    assert "hint: the environment's record is damaged or crafted" in refused.stderr
    assert outside.read_text() == "mine\n"
    assert snapshot(env) == before


@pytest.mark.slow
@pytest.mark.parametrize("renames", [1, 12, 40])
def test_a_kill_9_mid_update_is_rolled_back_by_the_next_run(
    tmp_path: Path, locks: dict[str, Path], renames: int
) -> None:
    """kill -9 after the journal is written (1), while the old files move aside (12) and while
    the new ones move in (40): ``verify`` refuses to vouch for the environment, and the next
    ``create --update`` gives the old environment back exactly (every file its old inode and
    bytes) before it updates."""
    assert create(tmp_path, locks["A"]).returncode == 0
    env = tmp_path / "env"
    before = snapshot(env)
    log = tmp_path / "crash.log"
    killed = create(
        tmp_path, locks["B"], "--update",
        PYTHONPATH=str(CRASHPOINT), EF_CRASH_AFTER=f"os.rename:{renames}:{env}",
        EF_CRASH_LOG=str(log),
    )  # fmt: skip
    assert log.is_file(), "the cut was never reached: the test would show nothing"
    assert killed.returncode == -9
    assert any(p.name.startswith(".envfactory-update-") for p in env.iterdir())
    assert snapshot(env) != before  # cut in the middle

    refused = envfactory(tmp_path, "verify", str(env))
    assert refused.returncode == 1
    assert f"error: an update of {env} was cut short" in refused.stderr
    assert "hint: 'envfactory create --update" in refused.stderr

    # the next update on the prefix: rolled back first (here to the same lock: no change)
    again = create(tmp_path, locks["A"], "--update")
    assert again.returncode == 0, again.stderr
    assert "rolled back an update of" in again.stderr
    assert "linux-64: no changes" in again.stdout
    restored = snapshot(env)
    # the marker and the activation-less own files are written anew by every update
    assert {k: v for k, v in restored.items() if not k.startswith("conda-meta/envfactory")} == {
        k: v for k, v in before.items() if not k.startswith("conda-meta/envfactory")
    }
    assert verify_environment(env).identical
    # and the update it cut goes through
    done = create(tmp_path, locks["B"], "--update")
    assert done.returncode == 0, done.stderr
    assert verify_environment(env).identical


@pytest.mark.slow
def test_a_kill_9_after_the_commit_keeps_the_update(tmp_path: Path, locks: dict[str, Path]) -> None:
    """Cut after the journal says ``committed`` (the 52nd rename: 1 journal, 26 paths aside, 24
    in, then the commit's journal): the update stands; the next run only clears the journal."""
    assert create(tmp_path, locks["A"]).returncode == 0
    env = tmp_path / "env"
    log = tmp_path / "crash.log"
    killed = create(
        tmp_path, locks["B"], "--update",
        PYTHONPATH=str(CRASHPOINT), EF_CRASH_AFTER=f"os.rename:52:{env}", EF_CRASH_LOG=str(log),
    )  # fmt: skip
    assert log.is_file() and killed.returncode == -9
    assert verify_environment(env).identical  # the new environment, whole
    again = create(tmp_path, locks["B"], "--update")
    assert again.returncode == 0, again.stderr
    assert "finished the clean-up of an update" in again.stderr
    assert not any(p.name.startswith(".envfactory-update-") for p in env.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signal", "event"),
    [("SIGINT", "os.rename:12"), ("SIGTERM", "os.rename:40"), ("SIGINT", "open:2")],
)
def test_an_interrupt_mid_update_gives_the_old_environment_back(
    tmp_path: Path, locks: dict[str, Path], signal: str, event: str
) -> None:
    """A Ctrl-C or a SIGTERM while the old files move aside (rename 12) or the new ones move in
    (rename 40) is held back until the renames are done, then the update is undone; one while
    the new packages are linked into the journal (the 2nd file written there) stops it before
    the prefix is touched. Exit 130, the old environment exactly, no journal left."""
    assert create(tmp_path, locks["A"]).returncode == 0
    env = tmp_path / "env"
    before = snapshot(env)
    log = tmp_path / "crash.log"
    name, count = event.rsplit(":", 1)
    stopped = create(
        tmp_path, locks["B"], "--update",
        PYTHONPATH=str(CRASHPOINT), EF_CRASH_AFTER=f"{name}:{count}:{env}",
        EF_CRASH_SIGNAL=signal, EF_CRASH_LOG=str(log),
    )  # fmt: skip
    assert log.is_file(), "the signal was never sent: the test would show nothing"
    assert stopped.returncode == 130, stopped.stdout + stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert snapshot(env) == before
    assert verify_environment(env).identical


def test_a_new_file_over_one_the_environment_holds_changes_nothing(
    tmp_path: Path, locks: dict[str, Path]
) -> None:
    """A path a new package installs is never replaced in place: a file there that no removed
    package owns (the user's) stops the update before anything moves."""
    assert create(tmp_path, locks["A"]).returncode == 0
    env = tmp_path / "env"
    (env / "share/new").mkdir(parents=True)
    (env / "share/new/y.txt").write_text("the user's\n")
    before = snapshot(env)
    refused = create(tmp_path, locks["B"], "--update")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "the new lock installs share/new/y.txt, where the environment has a file" in (
        refused.stderr
    )
    assert "hint: build the environment anew instead: envfactory create --force" in refused.stderr
    assert snapshot(env) == before


def test_an_update_running_elsewhere_is_not_interfered_with(
    tmp_path: Path, locks: dict[str, Path]
) -> None:
    """A journal whose lock is held (an update running in another process) stops a second
    update and ``verify``; nothing of it is touched."""
    from envfactory.cache.staging import Staging

    assert create(tmp_path, locks["A"]).returncode == 0
    env = tmp_path / "env"
    running = Staging.make(env, ".envfactory-update-")  # its flock held by this process
    try:
        (running.path / "journal.json").write_text('{"state": "applying"}')
        refused = create(tmp_path, locks["B"], "--update")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"error: another envfactory is updating {env}" in refused.stderr
        checked = envfactory(tmp_path, "verify", str(env))
        assert checked.returncode == 1
        assert "another envfactory is updating" in checked.stderr
        assert (running.path / "journal.json").is_file()
    finally:
        running.remove()
    assert create(tmp_path, locks["B"], "--update").returncode == 0


def test_a_package_that_installs_into_the_journals_place_is_refused(tmp_path: Path) -> None:
    """``.envfactory-update-*`` is one of envfactory's own paths: a package that installs there
    (where a journal lives, and is read back after a crash) never reaches the cache."""
    evil = Crafted("evil", files={".envfactory-update-0/journal.json": b'{"state": "applying"}'})
    lock = lock_of(tmp_path, "evil", [evil])
    refused = envfactory(tmp_path, "create", str(lock), "-p", str(tmp_path / "env"),
                         "--platform", "linux-64")  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert ".envfactory-update-0/journal.json" in refused.stderr
    assert not (tmp_path / "env").exists()


def win_lock(tmp: Path, name: str, packages: list[Crafted]) -> Path:
    """A win-64 lock whose file:// URLs a Windows program reads (wine's Z: drive)."""
    archives = {write_crafted(tmp / "channel", p): p for p in packages}
    lock = write_lock(tmp / "locks" / name, archives, platform="win-64")
    lock.write_text(lock.read_text().replace("file:///", "file:///Z:/"), encoding="utf-8")
    return lock


@pytest.mark.wine
@pytest.mark.skipif(shutil.which("wine") is None, reason="wine is not installed")
def test_an_update_in_place_on_a_windows_host(
    request: pytest.FixtureRequest, wine: WinePrefix, tmp_path: Path
) -> None:
    """envfactory as a Windows program (tests/shells/winhost.py) updates an environment in
    place: the journal's lock, renames and clean-up under Windows' rules, the kept files the
    same hard links."""
    from shells import winhost
    from shells.wine import win_path

    cache = request.config.cache
    folder = Path(cache.mkdir("windows-host")) if cache else tmp_path / "winhost"
    python = winhost.prepare(folder)
    winhost.add_process_prng(wine)

    def win(pkg: Crafted) -> Crafted:
        return Crafted(pkg.name, pkg.version, pkg.build, "win-64", pkg.files)

    first = win_lock(tmp_path, "a", [win(KEEP), win(OLD), win(many("1.0"))])
    second = win_lock(tmp_path, "b", [win(KEEP), win(many("2.0")), win(NEW)])
    env_win = "C:\\envs\\app"
    settings = {"ENVFACTORY_PKGS_DIRS": "C:\\envfactory-pkgs", "ENVFACTORY_TRACEBACK": "1"}
    (created,) = winhost.run_batch(
        wine, python, [winhost.Job(["create", win_path(first), "-p", env_win])],
        tmp_path / "batch1", settings,
    )  # fmt: skip
    assert created.code == 0, created.stderr
    env = winhost.drive_c(wine, env_win)
    kept = (env / "lib/keep/k0.so").stat().st_ino
    updated, verified = winhost.run_batch(
        wine, python,
        [winhost.Job(["create", win_path(second), "-p", env_win, "--update"]),
         winhost.Job(["verify", env_win])],
        tmp_path / "batch2", settings,
    )  # fmt: skip
    assert updated.code == 0, updated.stderr
    assert "(1 conda packages kept, 2 linked)" in updated.stdout
    assert verified.code == 0 and "is identical" in verified.stdout, verified.stdout
    assert (env / "lib/keep/k0.so").stat().st_ino == kept
    assert (env / "lib/many/f00.txt").read_bytes() == b"2.0 0\n"
    assert not (env / "share/old").exists()
    assert not list(env.glob(".envfactory-update-*"))
