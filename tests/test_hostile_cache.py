"""Hostile cases for the shared package cache and for what create writes (issue 28, items 3-6
and the errno part of 7): a kill -9 at any point of filling or replacing an entry, a package
named by another package's archive, edits that would travel through hard links, archives that
expand far beyond what they declare, member modes, symlinks a package plants at envfactory's
own paths, a cache directory other users can write, and a full disk.

Run as root, and where it matters (a cache other users can write) as an unprivileged user:
a user is made with ``useradd`` when the tests run as root (skipped otherwise)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from crafted import Crafted, crafted_lock, write_crafted, write_lock

from envfactory.cache.pkgcache import CacheLocation, PackageCache
from envfactory.errors import EnvfactoryError, ToolError
from envfactory.install.create import create_environment
from envfactory.install.verify import verify_environment

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
CRASHPOINT = Path(__file__).parent / "crashpoint"


def cache_at(path: Path) -> PackageCache:
    return PackageCache(CacheLocation(path))


def create(
    lock: Path, prefix: Path, cache: Path, *extra: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVFACTORY, "create", str(lock), "-p", str(prefix), "--platform", "linux-64", *extra],
        env={**os.environ, "ENVFACTORY_PKGS_DIRS": str(cache), **env},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def contents(prefix: Path, rel: str) -> bytes:
    return (prefix / rel).read_bytes()


# ------------------------------------------------------------------------------------------
# kill -9 while an entry is filled or replaced


def two_locks(tmp: Path) -> tuple[Path, Path]:
    """Two locks naming one name-version-build with different archives (a rebuilt package,
    a fork's channel): A's file says A, B's says B."""
    a = crafted_lock(tmp / "A", [Crafted("dup", files={"share/dup.txt": b"A\n", "share/k": b"1"})])
    b = crafted_lock(tmp / "B", [Crafted("dup", files={"share/dup.txt": b"BB\n", "share/k": b"2"})])
    return a, b


# where a fill or a replacement is cut: after the entry's publishing rename, in the middle of
# removing a directory (the old code's replacement), after the first file it writes
CUTS = [("os.rename", 1), ("os.remove", 1), ("os.rmdir", 1), ("open", 2)]


@pytest.mark.slow
@pytest.mark.parametrize(("event", "n"), CUTS)
def test_a_kill_9_while_another_archive_fills_never_serves_it_under_the_locks_hash(
    tmp_path: Path, event: str, n: int
) -> None:
    """Lock A's entry is in the cache; a create of lock B (same name, version and build,
    another archive) is killed between two system calls of its fill. The next create of A
    gets A's files (and verify says so), and a create of B gets B's."""
    lock_a, lock_b = two_locks(tmp_path)
    cache = tmp_path / "cache"
    assert create(lock_a, tmp_path / "a0", cache).returncode == 0
    log = tmp_path / "crash.log"
    killed = create(
        lock_b, tmp_path / "b0", cache,
        PYTHONPATH=str(CRASHPOINT), EF_CRASH_AFTER=f"{event}:{n}:{cache}", EF_CRASH_LOG=str(log),
    )  # fmt: skip
    assert "Traceback" not in killed.stderr
    assert log.is_file(), "the cut was never reached: the test would show nothing"
    for name, lock, want in (
        ("a1", lock_a, b"A\n"),
        ("b1", lock_b, b"BB\n"),
        ("a2", lock_a, b"A\n"),
    ):
        done = create(lock, tmp_path / name, cache)
        assert done.returncode == 0, (log.read_text() if log.exists() else "", done.stderr)
        assert contents(tmp_path / name, "share/dup.txt") == want
        assert verify_environment(tmp_path / name).identical


@pytest.mark.slow
def test_a_kill_9_while_cache_clean_removes_an_entry_breaks_no_later_create(tmp_path: Path) -> None:
    lock = crafted_lock(
        tmp_path, [Crafted("big", files={f"share/f{i}": b"x" * i for i in range(30)})]
    )
    cache = tmp_path / "cache"
    assert create(lock, tmp_path / "a", cache).returncode == 0
    subprocess.run(
        [ENVFACTORY, "cache", "clean", "-y"],
        env={**os.environ, "ENVFACTORY_PKGS_DIRS": str(cache), "PYTHONPATH": str(CRASHPOINT),
             "EF_CRASH_AFTER": f"os.remove:5:{cache}", "EF_CRASH_LOG": str(tmp_path / "crash.log")},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (tmp_path / "crash.log").is_file()
    done = create(lock, tmp_path / "b", cache)
    assert done.returncode == 0, done.stderr
    assert verify_environment(tmp_path / "b").identical


# ------------------------------------------------------------------------------------------
# each package's own index.json against the lock's record, on every use


def test_a_cached_archive_named_as_another_package_is_refused(tmp_path: Path) -> None:
    """Lock A installs ``real``; lock C names ``fake`` with real's URL and hashes. The entry
    real's archive left in the cache is not linked as ``fake``."""
    real = Crafted("real", files={"share/real.txt": b"real\n"})
    lock_a = crafted_lock(tmp_path / "A", [real])
    fake = Crafted("fake", files=real.files)
    archive = tmp_path / "C" / "channel" / "linux-64" / fake.filename
    archive.parent.mkdir(parents=True)
    shutil.copyfile(tmp_path / "A" / "channel" / "linux-64" / real.filename, archive)
    lock_c = write_lock(tmp_path / "C", {archive: fake})
    cache = cache_at(tmp_path / "cache")
    create_environment(lock_a, tmp_path / "a", platform="linux-64", cache=cache)
    with pytest.raises(EnvfactoryError, match=r"the archive says it is real 1\.0 h0_0"):
        create_environment(lock_c, tmp_path / "c", platform="linux-64", cache=cache)
    assert not (tmp_path / "c").exists()


def test_a_package_whose_index_names_another_subdir_is_refused(tmp_path: Path) -> None:
    pkg = Crafted("wrongsub", files={"share/w.txt": b"w\n"}, index={"subdir": "osx-64"})
    lock = crafted_lock(tmp_path, [pkg])
    cache = cache_at(tmp_path / "cache")
    with pytest.raises(EnvfactoryError, match=r"osx-64"):
        create_environment(lock, tmp_path / "env", platform="linux-64", cache=cache)
    assert not (tmp_path / "env").exists()


# ------------------------------------------------------------------------------------------
# edits do not travel


def test_an_edit_in_one_environment_reaches_neither_the_cache_nor_the_next_create(
    tmp_path: Path,
) -> None:
    pkg = Crafted("shared", files={"share/s/conf.txt": b"original\n", "share/s/other": b"o\n"})
    lock = crafted_lock(tmp_path, [pkg])
    cache = cache_at(tmp_path / "cache")
    create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    create_environment(lock, tmp_path / "b", platform="linux-64", cache=cache)
    edited = tmp_path / "a" / "share/s/conf.txt"
    with edited.open("r+b") as handle:  # an in-place edit, as `>>` or an editor without backup
        handle.write(b"EDITED!!\n")
    create_environment(lock, tmp_path / "c", platform="linux-64", cache=cache)
    assert contents(tmp_path / "c", "share/s/conf.txt") == b"original\n"
    assert verify_environment(tmp_path / "c").identical
    # the environment that shared the edited inode is named, with the file
    report = verify_environment(tmp_path / "b")
    altered = [(p.path, p.problem) for p in report.altered_files]
    assert (tmp_path / "b" / "share/s/conf.txt").stat().st_ino == edited.stat().st_ino
    assert [path for path, _ in altered] == ["share/s/conf.txt"]
    assert "shared by 2 hard links" in altered[0][1], altered


# ------------------------------------------------------------------------------------------
# archives bounded before they are unpacked; modes under the umask


def bomb(channel: Path, name: str, declared: int, actual: int) -> tuple[Path, Crafted]:
    """An archive whose paths.json declares ``declared`` bytes for one file while its tar
    member holds ``actual`` zero bytes (bzip2 shrinks them to almost nothing)."""
    pkg = Crafted(name, files={"share/blob": b"\0" * declared})
    path = write_crafted(channel, pkg)
    with tarfile.open(path, "r:bz2") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]  # type: ignore[union-attr]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as out:
        for member, data in members:
            if member.name == "share/blob":
                member.size = actual
                out.addfile(member, _Zeros(actual))
            else:
                out.addfile(member, io.BytesIO(data) if data is not None else None)
    path.write_bytes(buffer.getvalue())
    return path, pkg


class _Zeros:
    def __init__(self, n: int) -> None:
        self.left = n

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        self.left -= size
        return b"\0" * size


class PeakUsage:
    """The most bytes the files under ``root`` held at once while the block ran (sampled
    every few milliseconds from another thread)."""

    def __init__(self, root: Path) -> None:
        import threading

        self.root, self.peak = root, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch)

    def _watch(self) -> None:
        while not self._stop.is_set():
            total = 0
            for dirpath, _dirs, files in os.walk(self.root):  # a walk survives removals
                for name in files:
                    with contextlib.suppress(OSError):
                        total += os.lstat(os.path.join(dirpath, name)).st_size  # noqa: PTH118
            self.peak = max(self.peak, total)
            self._stop.wait(0.002)

    def __enter__(self) -> PeakUsage:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_an_archive_that_expands_beyond_its_paths_json_is_refused_before_it_fills_the_disk(
    tmp_path: Path,
) -> None:
    path, pkg = bomb(tmp_path / "channel", "bomb", declared=10, actual=32 << 20)
    assert path.stat().st_size < 20_000
    lock = write_lock(tmp_path / "lock", {path: pkg})
    cache = cache_at(tmp_path / "cache")
    with (
        PeakUsage(tmp_path / "cache") as usage,
        pytest.raises(EnvfactoryError, match=r"share/blob"),
    ):
        create_environment(lock, tmp_path / "env", platform="linux-64", cache=cache)
    assert usage.peak < 1 << 20, usage.peak
    assert not (tmp_path / "env").exists()


def _reordered(path: Path, first: str) -> None:
    """Rewrite the .tar.bz2 at ``path`` with its member ``first`` ahead of all the others."""
    with tarfile.open(path, "r:bz2") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]  # type: ignore[union-attr]
    members.sort(key=lambda item: item[0].name != first)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as out:
        for member, data in members:
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    path.write_bytes(buffer.getvalue())


@pytest.mark.parametrize("order", ["info-first", "package-first"])
@pytest.mark.parametrize(
    ("declared", "actual", "refused"),
    [
        (10, 10, None),
        (10, 11, "holds 11 bytes, paths.json declares 10"),
        (10, 32 << 20, "share/blob"),
    ],
)
def test_a_tar_bz2_is_bounded_in_one_pass_with_the_section_readers_verdict(
    tmp_path: Path, order: str, declared: int, actual: int, refused: str | None
) -> None:
    """A .tar.bz2 is read once for its bounds (info/ first, as conda-build writes it), with the
    verdict py-rattler's section reader gives; with a package member ahead of paths.json the
    one pass cannot know its bound, and the section reader decides."""
    from envfactory.cache import unpack

    path, _pkg = bomb(tmp_path / "channel", "bomb", declared=declared, actual=actual)
    if order == "package-first":
        _reordered(path, "share/blob")
    verdicts: list[str | None] = []
    for reader in (unpack.check_bounds, unpack._bounds_by_section):
        try:
            if reader is unpack.check_bounds:
                unpack.check_bounds("bomb", path)
            else:
                unpack._bounds_by_section(
                    "bomb", path, unpack.SLACK_RATIO * path.stat().st_size + unpack.SLACK_BYTES
                )
            verdicts.append(None)
        except unpack.ArchiveTooLarge as exc:
            verdicts.append(exc.message)
    assert verdicts[0] == verdicts[1]
    if refused is None:
        assert verdicts[0] is None
    else:
        assert verdicts[0] is not None and refused in verdicts[0]
    budget = unpack.SLACK_RATIO * path.stat().st_size + unpack.SLACK_BYTES
    if order == "package-first" and refused is None:
        assert not unpack._bounds_in_one_pass("bomb", path, budget)  # left to the section reader
    elif order == "info-first" and refused is None:
        assert unpack._bounds_in_one_pass("bomb", path, budget)


def test_an_archive_with_the_wrong_hash_is_not_unpacked(tmp_path: Path) -> None:
    """The hash is checked before extraction: an archive that differs from the lock leaves no
    extracted byte anywhere, however far it would expand."""
    good = Crafted("bomb", files={"share/blob": b"\0" * 10})
    lock = crafted_lock(tmp_path, [good])
    bomb(tmp_path / "channel", "bomb", declared=10, actual=32 << 20)  # over the locked file
    cache = cache_at(tmp_path / "cache")
    with PeakUsage(tmp_path / "cache") as usage, pytest.raises(ToolError, match="sha256"):
        create_environment(lock, tmp_path / "env", platform="linux-64", cache=cache)
    assert usage.peak < 1 << 20, usage.peak


def test_member_modes_follow_the_umask_in_the_cache_and_the_prefix(tmp_path: Path) -> None:
    pkg = Crafted("loose", files={"share/l/world": b"w\n", "bin/tool": b"#!/bin/sh\n"})
    path = write_crafted(tmp_path / "channel", pkg)
    with tarfile.open(path, "r:bz2") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]  # type: ignore[union-attr]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as out:
        for member, data in members:
            if member.name == "share/l/world":
                member.mode = 0o666
            elif member.name == "bin/tool":
                member.mode = 0o4777  # setuid too
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    path.write_bytes(buffer.getvalue())
    lock = write_lock(tmp_path / "lock", {path: pkg})
    cache = cache_at(tmp_path / "cache")
    old = os.umask(0o022)
    try:
        create_environment(lock, tmp_path / "env", platform="linux-64", cache=cache)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "env/share/l/world").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "env/bin/tool").stat().st_mode) == 0o755
    for p in (tmp_path / "cache").rglob("*"):
        if p.is_file() and not p.is_symlink():
            assert not p.stat().st_mode & 0o7022, (p, oct(p.stat().st_mode))


# ------------------------------------------------------------------------------------------
# writes never follow links a package planted


def planted(tmp: Path, link: str, target: str) -> Path:
    pkg = Crafted(
        "planter",
        files={"share/victim.txt": b"victim\n"},
        symlinks={link: target},
    )
    return crafted_lock(tmp, [pkg])


@pytest.mark.parametrize(
    ("link", "target"),
    [("conda-meta/envfactory.json", "../share/victim.txt"),
     ("conda-meta/state", "../share/victim.txt"),
     ("etc/conda/envfactory/envfactory-x.json", "../../../share/victim.txt")],
)  # fmt: skip
def test_a_package_file_at_envfactorys_own_paths_is_refused(
    tmp_path: Path, link: str, target: str
) -> None:
    lock = planted(tmp_path, link, target)
    cache = cache_at(tmp_path / "cache")
    with pytest.raises(EnvfactoryError, match=link.split("/")[0]):
        create_environment(lock, tmp_path / "env", platform="linux-64", cache=cache)
    for p in (tmp_path / "cache").rglob("victim.txt"):
        assert p.read_bytes() == b"victim\n"
    assert not (tmp_path / "env").exists()


def test_force_does_not_truncate_through_a_symlinked_staging_marker(tmp_path: Path) -> None:
    lock = crafted_lock(tmp_path, [Crafted("plain", files={"share/p.txt": b"p\n"})])
    cache = tmp_path / "cache"
    assert create(lock, tmp_path / "env", cache).returncode == 0
    outside = tmp_path / "precious.txt"
    outside.write_bytes(b"keep me\n")
    (tmp_path / "env" / ".envfactory-staging").symlink_to(outside)
    done = create(lock, tmp_path / "env", cache, "--force")
    assert done.returncode == 0, done.stderr
    assert outside.read_bytes() == b"keep me\n"


def test_kernel_target_env_does_not_write_through_a_symlinked_share_jupyter(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta" / "envfactory.json").write_text(
        json.dumps(
            {"lock": str(tmp_path / "x.yml"), "platform": "linux-64", "combo": "tf114-cuda100"}
        )
    )
    outside = tmp_path / "outside"
    outside.mkdir()
    (prefix / "share").mkdir()
    (prefix / "share" / "jupyter").symlink_to(outside)
    done = subprocess.run(
        [ENVFACTORY, "kernel", str(prefix), "--target", "env"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert list(outside.rglob("*")) == [], done.stderr
    assert done.returncode == 1 and "hint:" in done.stderr, done.stderr


# ------------------------------------------------------------------------------------------
# a cache directory other users can write


def test_a_cache_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    lock = crafted_lock(tmp_path, [Crafted("plain", files={"share/p.txt": b"p\n"})])
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    done = create(lock, tmp_path / "env", cache)
    assert done.returncode != 0
    assert "writable by other users" in done.stderr and "hint:" in done.stderr, done.stderr
    assert not (tmp_path / "env").exists()
    cache.chmod(0o755)
    assert create(lock, tmp_path / "env", cache).returncode == 0


@pytest.fixture(scope="module")
def other_user() -> pwd.struct_passwd:
    """A real unprivileged user, made with useradd (the tests run as root in CI)."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("useradd", "setpriv", "unshare")):
        pytest.skip("another user needs root, useradd, setpriv and unshare")
    name = "efcache"
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
        return pwd.getpwnam(name)


def as_user(
    user: pwd.struct_passwd, argv: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``user`` (setpriv). Where this interpreter lives under a directory
    other users cannot enter (pyenv under /root), that directory is covered, in a private
    mount namespace of this command only, by a tmpfs that shows just the interpreter's tree."""
    real = Path(sys.executable).resolve()
    blocked = next((p for p in reversed(real.parents) if not p.stat().st_mode & 0o001), None)
    drop = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
    if blocked is None:
        command = [*drop, *argv]
    else:
        keep = blocked / real.relative_to(blocked).parts[0]
        script = (
            'set -e; t=$(mktemp -d); mount --bind "$1" "$t"; '
            'mount -t tmpfs -o mode=0755 tmpfs "$2"; mkdir "$1"; mount --bind "$t" "$1"; '
            'shift 2; exec "$@"'
        )
        command = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                   str(keep), str(blocked), *drop, *argv]  # fmt: skip
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory every user can read (pytest's own tmp_path is under a 0700 directory)."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="envfactory-users-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_another_users_cache_is_refused_and_its_planted_entries_never_linked(
    shared_tmp: Path, other_user: pwd.struct_passwd
) -> None:
    """Another local user (a real uid) fills a cache of their own as an unprivileged user,
    then edits the entry's file in place (what a planted entry is). Root's create pointed at
    that cache is refused before anything is linked; so is the other user's create pointed at
    root's cache, and root's create with a cache whose entries directory anyone can write."""
    lock = crafted_lock(shared_tmp, [Crafted("plain", files={"share/p.txt": b"genuine\n"})])
    for p in shared_tmp.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    theirs = shared_tmp / "theirs"
    theirs.mkdir()
    os.chown(theirs, other_user.pw_uid, other_user.pw_gid)
    env = {**os.environ, "HOME": str(theirs), "ENVFACTORY_PKGS_DIRS": str(theirs / "cache")}
    argv = [ENVFACTORY, "create", str(lock), "-p", str(theirs / "env"), "--platform", "linux-64"]
    done = as_user(other_user, argv, env)
    assert done.returncode == 0, done.stderr  # an unprivileged create with its own cache
    assert (theirs / "env/share/p.txt").stat().st_uid == other_user.pw_uid
    planted = list((theirs / "cache").rglob("p.txt"))
    assert planted
    as_user(other_user, ["sh", "-c", f"printf 'planted!' > '{planted[0]}'"], env)
    assert planted[0].read_bytes() == b"planted!"

    mine = create(lock, shared_tmp / "mine", theirs / "cache")
    assert mine.returncode == 2, mine.stdout
    assert "owned by efcache" in mine.stderr and "hint:" in mine.stderr, mine.stderr
    assert not (shared_tmp / "mine").exists()

    roots = shared_tmp / "roots-cache"
    assert create(lock, shared_tmp / "root-env", roots).returncode == 0
    env = {**env, "ENVFACTORY_PKGS_DIRS": str(roots)}
    argv = [ENVFACTORY, "create", str(lock), "-p", str(theirs / "env2"), "--platform", "linux-64"]
    done = as_user(other_user, argv, env)
    assert done.returncode == 2 and "owned by root" in done.stderr, done.stderr

    (roots / "sha256").chmod(0o777)  # a mistake: now anyone could plant an entry there
    again = create(lock, shared_tmp / "root-env2", roots)
    assert again.returncode == 2 and "writable by other users" in again.stderr, again.stderr
    assert not (shared_tmp / "root-env2").exists()


# ------------------------------------------------------------------------------------------
# a full disk


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount(), reason="mounting a small tmpfs needs root")
@pytest.mark.parametrize("where", ["cache", "prefix"])
def test_a_full_disk_says_disk_full_with_the_path(tmp_path: Path, where: str) -> None:
    pkg = Crafted("roomy", files={f"share/r/f{i}": os.urandom(64 << 10) for i in range(16)})
    lock = crafted_lock(tmp_path, [pkg])
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(small)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        cache = small / "cache" if where == "cache" else tmp_path / "cache"
        prefix = small / "env" if where == "prefix" else tmp_path / "env"
        if where == "prefix":  # the cache on another filesystem: rattler copies
            pass
        done = create(lock, prefix, cache)
        assert done.returncode == 2, done.stderr
        assert "disk full" in done.stderr and str(small) in done.stderr, done.stderr
        assert "damaged" not in done.stderr and "Traceback" not in done.stderr
        assert "hint:" in done.stderr
    finally:
        subprocess.run(["umount", "-l", str(small)])


# ------------------------------------------------------------------------------------------
# waits: none between two creates, and those there are say what they wait for


@pytest.mark.slow
def test_two_creates_of_other_archives_under_the_same_names_do_not_wait_for_each_other(
    tmp_path: Path,
) -> None:
    """Two locks naming the same name-version-builds with other archives (a rebuilt
    channel), created at once into one cache, twice over: each gets its own files. Before
    entries were named by content, each create held entries the other had to replace, and
    both waited (600 s, silently)."""
    names = [f"d{i}" for i in range(6)]
    lock_a = crafted_lock(
        tmp_path / "A", [Crafted(n, files={f"share/{n}": b"A" + n.encode()}) for n in names]
    )
    lock_b = crafted_lock(
        tmp_path / "B", [Crafted(n, files={f"share/{n}": b"B" + n.encode()}) for n in names]
    )
    cache = tmp_path / "cache"
    env = {**os.environ, "ENVFACTORY_PKGS_DIRS": str(cache)}
    for round_ in range(2):
        procs = {
            which: subprocess.Popen(
                [
                    ENVFACTORY,
                    "create",
                    str(lock),
                    "-p",
                    str(tmp_path / f"{which}{round_}"),
                    "--platform",
                    "linux-64",
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for which, lock in (("a", lock_a), ("b", lock_b))
        }
        for which, proc in procs.items():
            _out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            assert "waiting" not in err
            prefix = tmp_path / f"{which}{round_}"
            assert verify_environment(prefix).identical
            for n in names:
                assert contents(prefix, f"share/{n}") == which.upper().encode() + n.encode()


def test_a_wait_for_a_lock_says_what_it_waits_for(tmp_path: Path) -> None:
    """While another process holds an entry exclusively (``cache clean`` removing it), a
    create waits and says which entry and why, then goes on."""
    import fcntl
    import threading

    lock = crafted_lock(tmp_path, [Crafted("held", files={"share/h": b"h\n"})])
    cache = tmp_path / "cache"
    assert create(lock, tmp_path / "a", cache).returncode == 0
    (lock_file,) = (cache / "sha256").glob("*.lock")
    with lock_file.open("rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        threading.Timer(2.5, held.close).start()
        done = create(lock, tmp_path / "b", cache)
    assert done.returncode == 0, done.stderr
    assert (
        f"waiting 1 s for the cache entry {lock_file.with_suffix('')}" in done.stdout + done.stderr
    )
    assert "cache clean" in done.stdout + done.stderr
