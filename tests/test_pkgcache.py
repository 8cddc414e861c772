"""The shared package cache: archives checked against the lock before they enter it, extracted
once, hard-linked into prefixes (copied across filesystems), safe under two creates at once,
stale work swept, ``envfactory cache info|clean``; ``.conda`` and ``.tar.bz2`` archives."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from crafted import Crafted, crafted_lock, write_crafted, write_lock
from hypothesis import given, settings
from hypothesis import strategies as st

from envfactory import ownfiles
from envfactory.cache.layout import MEMO, STAGING, default_root
from envfactory.cache.pathcheck import (
    UnsafePackage,
    check_all_relative,
    check_links_across,
    check_relative,
    parse_paths,
    parse_paths_one_by_one,
    summarize,
)
from envfactory.cache.pkgcache import CacheLocation, PackageCache, cache_location
from envfactory.cache.staging import MARKER, Staging, sweep_stale
from envfactory.cache.summary import SUMMARY, EntrySummary, read_summary
from envfactory.errors import ToolError, UserInputError
from envfactory.install.create import create_environment
from envfactory.install.verify import verify_environment
from envfactory.lockfile.models import LockedPackage

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")


def payload(name: str, n: int = 3) -> dict[str, bytes]:
    return {f"share/{name}/f{i}.txt": f"{name} file {i}\n".encode() * (i + 1) for i in range(n)}


def packages(fmt: str = "tar.bz2", count: int = 4) -> list[Crafted]:
    out = [Crafted(f"pkg{i}", files=payload(f"pkg{i}"), fmt=fmt) for i in range(count)]
    out.append(
        Crafted(
            "withlink",
            files={"lib/libw.so.1": b"\x7fELF stub\n"},
            symlinks={"lib/libw.so": "libw.so.1"},
            fmt=fmt,
        )
    )
    return out


def cache_at(path: Path, sources: tuple[Path, ...] = ()) -> PackageCache:
    return PackageCache(CacheLocation(path, sources))


def env_with_cache(cache: Path) -> dict[str, str]:
    return {**os.environ, "ENVFACTORY_PKGS_DIRS": str(cache)}


def entry_of(tmp_path: Path, name: str, fmt: str = "tar.bz2") -> Path:
    """The cache entry of the crafted package ``name`` (named by its archive's sha256)."""
    import hashlib

    archive = tmp_path / "channel" / "linux-64" / f"{name}-1.0-h0_0.{fmt}"
    return tmp_path / "cache" / "sha256" / hashlib.sha256(archive.read_bytes()).hexdigest()


def test_where_the_cache_lives(tmp_path: Path) -> None:
    home = Path.home()
    assert default_root({}) == home / ".cache" / "envfactory" / "pkgs"
    assert default_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "envfactory" / "pkgs"
    # a relative XDG_CACHE_HOME is invalid per the XDG spec: ignored
    assert default_root({"XDG_CACHE_HOME": "rel"}) == home / ".cache" / "envfactory" / "pkgs"
    two = f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}"
    location = cache_location({"ENVFACTORY_PKGS_DIRS": two, "CONDA_PKGS_DIRS": "/x/pkgs,/y"})
    assert location.root == tmp_path / "a"
    assert location.archive_sources == (tmp_path / "b", Path("/x/pkgs"), Path("/y"))


@pytest.mark.parametrize("fmt", ["tar.bz2", "conda"])
def test_extracted_once_then_hard_linked_into_each_prefix(tmp_path: Path, fmt: str) -> None:
    lock = crafted_lock(tmp_path, packages(fmt))
    cache = cache_at(tmp_path / "cache")
    first = create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    assert first.from_cache == 0
    second = create_environment(lock, tmp_path / "b", platform="linux-64", cache=cache)
    assert second.from_cache == second.conda == 5
    entry = entry_of(tmp_path, "pkg1", fmt) / "pkg" / "share/pkg1/f2.txt"
    a, b = (tmp_path / p / "share/pkg1/f2.txt" for p in ("a", "b"))
    assert a.read_bytes() == b"pkg1 file 2\n" * 3
    assert entry.stat().st_ino == a.stat().st_ino == b.stat().st_ino
    assert (tmp_path / "b" / "lib/libw.so").readlink() == Path("libw.so.1")
    # the entry's own record: the archive's hashes
    archive = tmp_path / "channel" / "linux-64" / f"pkg1-1.0-h0_0.{fmt}"
    import hashlib

    record = json.loads((entry_of(tmp_path, "pkg1", fmt) / "entry.json").read_text())
    assert record["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert record["md5"] == hashlib.md5(archive.read_bytes()).hexdigest()
    for prefix in ("a", "b"):
        report = verify_environment(tmp_path / prefix)
        assert report.identical and report.files_checked == 4 * 3 + 2
    assert list((tmp_path / "cache" / STAGING).iterdir()) == []


def test_an_archive_that_differs_from_the_lock_never_enters(tmp_path: Path) -> None:
    lock = crafted_lock(tmp_path, packages())
    victim = tmp_path / "channel/linux-64/pkg2-1.0-h0_0.tar.bz2"
    write_crafted(tmp_path / "channel", Crafted("pkg2", files={"share/pkg2/f0.txt": b"evil\n"}))
    assert victim.is_file()
    cache = cache_at(tmp_path / "cache")
    with pytest.raises(ToolError) as info:
        create_environment(lock, tmp_path / "env", platform="linux-64", cache=cache)
    assert "pkg2 1.0 h0_0" in info.value.message and "sha256" in info.value.message
    assert list((tmp_path / "cache" / "sha256").glob("*/pkg/share/pkg2")) == []
    assert not (tmp_path / "env").exists()
    assert list((tmp_path / "cache" / STAGING).iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if ".envfactory-" in p.name] == []


def test_a_tampered_cache_entry_is_replaced(tmp_path: Path) -> None:
    """An entry that lost a file, or whose record names another archive, is retired and
    extracted again from the locked archive."""
    lock = crafted_lock(tmp_path, packages())
    cache = cache_at(tmp_path / "cache")
    create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    (entry_of(tmp_path, "pkg0") / "pkg" / "share/pkg0/f0.txt").unlink()
    (entry_of(tmp_path, "pkg1") / "entry.json").write_text('{"sha256": "' + "0" * 64 + '"}')
    result = create_environment(lock, tmp_path / "b", platform="linux-64", cache=cache)
    assert result.from_cache == 3
    assert (tmp_path / "b/share/pkg0/f0.txt").read_bytes() == b"pkg0 file 0\n"


def test_copied_where_hard_links_cannot_cross_filesystems(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test's temp dir")
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as other:
        lock = crafted_lock(tmp_path, packages())
        cache = cache_at(Path(other) / "cache")
        create_environment(lock, tmp_path / "env", platform="linux-64", cache=cache)
        copied = tmp_path / "env/share/pkg3/f1.txt"
        assert copied.read_bytes() == b"pkg3 file 1\n" * 2
        assert copied.stat().st_dev != (Path(other) / "cache").stat().st_dev
        assert verify_environment(tmp_path / "env").identical


def test_archives_from_conda_pkgs_dirs_are_used_after_their_hash_check(tmp_path: Path) -> None:
    """The lock's URLs are unreachable; conda's pkgs dir holds the archives."""
    pkgs = packages()
    archives = {write_crafted(tmp_path / "channel", p): p for p in pkgs}
    conda_pkgs = tmp_path / "conda-pkgs"
    conda_pkgs.mkdir()
    for path in archives:
        (conda_pkgs / path.name).write_bytes(path.read_bytes())
    lock = write_lock(tmp_path / "lock", archives)
    text = lock.read_text().replace((tmp_path / "channel").as_uri(), "http://127.0.0.1:9/ch")
    lock.write_text(text)
    cache = cache_at(tmp_path / "cache", (conda_pkgs,))
    create_environment(lock, tmp_path / "env", platform="linux-64", cache=cache)
    assert verify_environment(tmp_path / "env").identical
    # a different file under the same name in conda's dir is not used: the download is tried
    (conda_pkgs / "pkg0-1.0-h0_0.tar.bz2").write_bytes(b"not the package")
    with pytest.raises(ToolError) as info:
        create_environment(
            lock,
            tmp_path / "env2",
            platform="linux-64",
            cache=cache_at(tmp_path / "c2", (conda_pkgs,)),
        )
    assert "127.0.0.1:9" in info.value.message
    assert info.value.hint is not None
    for words in ("--channel-map", "ENVFACTORY_CHANNEL_MAP", "envfactory mirror"):
        assert words in info.value.hint
    assert (conda_pkgs / "pkg0-1.0-h0_0.tar.bz2").read_bytes() == b"not the package"


def test_an_md5_only_lock_is_checked_by_md5(tmp_path: Path) -> None:
    lock = crafted_lock(tmp_path, packages())
    text = "\n".join(line for line in lock.read_text().splitlines() if "sha256:" not in line)
    lock.write_text(text + "\n")
    cache = cache_at(tmp_path / "cache")
    create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    again = create_environment(lock, tmp_path / "b", platform="linux-64", cache=cache)
    assert again.from_cache == 5
    write_crafted(tmp_path / "channel", Crafted("pkg1", files={"share/x": b"other\n"}))
    shutil.rmtree(tmp_path / "cache" / "md5")
    with pytest.raises(ToolError, match="md5"):
        create_environment(lock, tmp_path / "c", platform="linux-64", cache=cache)


def test_names_from_the_lock_cannot_leave_the_cache(tmp_path: Path) -> None:
    cache = cache_at(tmp_path / "cache")
    bad = LockedPackage(
        manager="conda",
        name="..",
        version="1",
        platform="linux-64",
        url="file:///x/linux-64/..-1-0.tar.bz2",
        build="0",
        sha256="0" * 64,
    )
    with pytest.raises(UserInputError, match="not a conda name"):
        cache.acquire([bad])
    evil_build = LockedPackage(
        manager="conda",
        name="a",
        version="1",
        platform="linux-64",
        url="file:///x/linux-64/a-1-0.tar.bz2",
        build="0/../../x",
        sha256="0" * 64,
    )
    with pytest.raises(UserInputError, match="not a conda build"):
        cache.acquire([evil_build])
    assert not (tmp_path / "cache").exists()


def test_stale_staging_is_swept_and_live_staging_kept(tmp_path: Path) -> None:
    dead = tmp_path / ".env.envfactory-dead"
    dead.mkdir()
    (dead / MARKER).write_text("123\n")
    (dead / "half-written").write_text("x")
    unmarked = tmp_path / ".env.envfactory-notours"
    unmarked.mkdir()
    live = Staging.make(tmp_path, ".env.envfactory-")
    removed = sweep_stale(tmp_path, ".env.envfactory-")
    assert removed == [dead]
    assert live.path.is_dir() and unmarked.is_dir()
    live.remove()
    assert not live.path.exists()


def test_progress_is_reported_per_package(tmp_path: Path) -> None:
    lock = crafted_lock(tmp_path, packages())
    seen: list[tuple[str, str]] = []
    totals: list[int] = []
    from envfactory.cache.pkgcache import callbacks

    progress = callbacks(totals.append, lambda name, _n, outcome: seen.append((name, outcome)))
    cache = cache_at(tmp_path / "cache")
    create_environment(
        lock, tmp_path / "a", platform="linux-64", cache=cache, cache_progress=progress
    )
    assert totals == [5] and sorted(seen) == sorted((p.name, "extracted") for p in packages())


def run_create(lock: Path, prefix: Path, cache: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [ENVFACTORY, "create", str(lock), "-p", str(prefix), "--platform", "linux-64"],
        env=env_with_cache(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_creates_at_once_share_one_cold_cache(tmp_path: Path) -> None:
    many = [Crafted(f"p{i:02d}", files=payload(f"p{i:02d}", 6)) for i in range(30)]
    lock = crafted_lock(tmp_path, many)
    cache = tmp_path / "cache"
    procs = [run_create(lock, tmp_path / name, cache) for name in ("one", "two")]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "30 conda + 0 pip packages" in out
    for name in ("one", "two"):
        assert verify_environment(tmp_path / name).identical
    entries = sorted(p.name for p in (cache / "sha256").iterdir() if p.is_dir())
    assert entries == sorted(entry_of(tmp_path, f"p{i:02d}").name for i in range(30))
    assert list((cache / STAGING).iterdir()) == []
    one, two = (tmp_path / n / "share/p07/f5.txt" for n in ("one", "two"))
    assert one.stat().st_ino == two.stat().st_ino


def test_cache_info_and_clean(tmp_path: Path) -> None:
    lock = crafted_lock(tmp_path, packages())
    cache = tmp_path / "cache"
    created = subprocess.run(
        [ENVFACTORY, "create", str(lock), "-p", str(tmp_path / "env"), "--platform", "linux-64"],
        env=env_with_cache(cache), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    info = subprocess.run(
        [ENVFACTORY, "cache", "info", "--json"],
        env=env_with_cache(cache), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert info.returncode == 0, info.stderr
    data = json.loads(info.stdout)
    assert data["root"] == str(cache) and data["packages"] == 5 and data["bytes"] > 0
    assert data["locks"] == 1  # the parsed lock create kept (lockfile.load_document)
    # an entry some create is linking from (shared lock held) is not removed
    pkg0, pkg1 = entry_of(tmp_path, "pkg0"), entry_of(tmp_path, "pkg1")
    with Path(f"{pkg0}.lock").open("rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_SH)
        # without a terminal to ask on, clean deletes only with -y (as conda clean asks)
        unasked = subprocess.run(
            [ENVFACTORY, "cache", "clean"], stdin=subprocess.DEVNULL,
            env=env_with_cache(cache), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert unasked.returncode == 1 and "pass -y" in unasked.stderr
        assert pkg1.is_dir()
        cleaned = subprocess.run(
            [ENVFACTORY, "cache", "clean", "-y"],
            env=env_with_cache(cache), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert cleaned.returncode == 0, cleaned.stderr
    assert "removed 4" in cleaned.stdout
    assert (pkg0 / SUMMARY).is_file() and not pkg1.exists()
    assert not Path(f"{pkg1}.lock").exists()
    # the parsed locks go with the extracted packages
    assert not (cache / MEMO).exists()
    # the prefix does not depend on the cache: hard links keep the files
    assert verify_environment(tmp_path / "env").identical


def _forkserver_workers() -> int:
    """Processes forked by this test process's multiprocessing fork server (the cache's
    workers), read from /proc."""
    parents: dict[int, int] = {}
    server: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat_fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        parents[int(proc.name)] = int(stat_fields[1])
        if b"multiprocessing.forkserver" in cmdline and int(stat_fields[1]) == os.getpid():
            server.add(int(proc.name))
    return sum(1 for parent in parents.values() if parent in server)


def test_extraction_runs_on_a_pool_of_about_the_core_count(tmp_path: Path) -> None:
    """Misses are extracted by worker processes (rattler's extraction holds the GIL): never
    more than workers() at once, and more than one when there are cores for it."""
    from envfactory.cache.pkgcache import callbacks
    from envfactory.cache.pool import workers

    many = [Crafted(f"q{i:02d}", files=payload(f"q{i:02d}", 40)) for i in range(3 * workers() + 5)]
    lock = crafted_lock(tmp_path, many)
    seen: list[int] = []
    outcomes: list[str] = []

    def fetched(_name: str, _n: int, outcome: str) -> None:
        seen.append(_forkserver_workers())
        outcomes.append(outcome)

    progress = callbacks(lambda _total: None, fetched)
    create_environment(
        lock, tmp_path / "env", platform="linux-64", cache=cache_at(tmp_path / "c"),
        cache_progress=progress,
    )  # fmt: skip
    assert outcomes == ["extracted"] * len(many)
    assert 1 <= max(seen) <= workers()
    if workers() > 1:
        assert max(seen) > 1


_PATH_PARTS = st.sampled_from(
    [
        *("lib", "a.txt", ".", "..", "", "/", "\\", "C:", "c:", "1:", "x\n", "\t", "\x00", "\x1f"),
        *("\r", "\x0b", "...", "b c", ".a", "a.", "..b", "./", "/.", ":", "\x7f", "\u00e9"),
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(_PATH_PARTS, max_size=5).map("/".join), max_size=6))
def test_check_all_relative_refuses_exactly_what_check_relative_refuses(paths: list[str]) -> None:
    """The one-search form of the per-path check (parse_paths and the check after linking use
    it on every file): same verdict, and the error names the first bad path."""
    first: str | None = None
    for path in paths:
        try:
            check_relative("p 1.0 h0", path)
        except UnsafePackage as exc:
            first = exc.message
            break
    try:
        check_all_relative("p 1.0 h0", paths)
    except UnsafePackage as exc:
        assert exc.message == first
    else:
        assert first is None


_SHA = "0" * 63 + "a"
_RAW_ENTRIES = st.fixed_dictionaries(
    {"_path": st.one_of(st.lists(_PATH_PARTS, min_size=1, max_size=3).map("/".join), st.just(1))},
    optional={
        "path_type": st.sampled_from(["hardlink", "softlink", "directory", "pipe", None]),
        "sha256": st.sampled_from([_SHA, _SHA.upper(), _SHA[:-1], _SHA + "\n" + _SHA, 7, None]),
        "size_in_bytes": st.sampled_from([0, 5, -1, True, "5", None]),
        "prefix_placeholder": st.sampled_from(["/opt/anaconda1anaconda2anaconda3", "", 3]),
        "file_mode": st.sampled_from(["text", "binary", "other", None]),
    },
)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(_RAW_ENTRIES, st.just("not a mapping")), max_size=6))
def test_parse_paths_bulk_check_gives_the_one_by_one_verdict(raws: list[object]) -> None:
    """parse_paths checks in bulk first and falls back to the entry-by-entry check: the same
    entries, or the same refusal, as checking each entry on its own."""
    try:
        expected: object = parse_paths_one_by_one("p 1.0 h0", raws)
    except UnsafePackage as exc:
        expected = exc.message
    try:
        got: object = parse_paths("p 1.0 h0", {"paths": raws})
    except UnsafePackage as exc:
        got = exc.message
    assert got == expected


# ------------------------------------------------------------------------------------------
# Entry summaries: what a warm create reads instead of every paths.json


def _summary_file(tmp_path: Path, name: str) -> Path:
    return entry_of(tmp_path, name) / SUMMARY


def test_a_warm_create_reads_the_summaries_not_paths_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = crafted_lock(tmp_path, packages())
    cache = cache_at(tmp_path / "cache")
    create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    doc = json.loads(_summary_file(tmp_path, "withlink").read_text())
    assert doc["links"] == ["lib/libw.so"] and doc["parents"] == ["lib"]
    assert doc["size"] == len(b"\x7fELF stub\n")

    from envfactory.cache import pathcheck

    def no_parse(*_args: object) -> None:
        raise AssertionError("paths.json parsed on a warm create")

    monkeypatch.setattr(pathcheck, "read_paths", no_parse)
    result = create_environment(lock, tmp_path / "b", platform="linux-64", cache=cache)
    assert result.from_cache == 5
    assert verify_environment(tmp_path / "b").identical


@pytest.mark.parametrize(
    "change",
    ["paths.json", "sha256", "format", "garbage", "missing", "misaligned", "not-an-inode"],
)
def test_a_summary_holds_only_for_the_paths_json_and_archive_it_was_made_from(
    tmp_path: Path, change: str
) -> None:
    """A summary is read only while the entry's paths.json is the file it was made from
    (inode, size, mtime, ctime) and the entry holds the same archive; otherwise the entry is
    retired and unpacked again from the locked archive: here paths.json was edited to list a
    path outside the prefix, which a stale summary would have let through."""
    lock = crafted_lock(tmp_path, packages())
    cache = cache_at(tmp_path / "cache")
    create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    entry = entry_of(tmp_path, "pkg2")
    sha = entry.name
    assert read_summary(entry, sha) is not None
    summary_path = entry / SUMMARY
    doc = json.loads(summary_path.read_text())
    if change == "paths.json":
        paths_json = entry / "pkg" / "info" / "paths.json"
        listed = json.loads(paths_json.read_text())
        listed["paths"].append({"_path": "../escape", "path_type": "hardlink"})
        paths_json.write_text(json.dumps(listed))
    elif change == "sha256":
        doc["sha256"] = "0" * 64
        summary_path.write_text(json.dumps(doc))
    elif change == "format":
        doc["format"] = 99
        summary_path.write_text(json.dumps(doc))
    elif change == "garbage":
        summary_path.write_text("{not json")
    elif change == "misaligned":  # a path without its inode
        assert doc["files"] and doc["file_inodes"]
        doc["file_inodes"] = doc["file_inodes"][:-1]
        summary_path.write_text(json.dumps(doc))
    elif change == "not-an-inode":
        doc["file_inodes"] = [str(i) for i in doc["file_inodes"]]
        summary_path.write_text(json.dumps(doc))
    else:
        summary_path.unlink()
    assert read_summary(entry, sha) is None
    # unpacked again from the archive, checked, with a summary for the next create
    result = create_environment(lock, tmp_path / "b", platform="linux-64", cache=cache)
    assert result.from_cache == 4
    assert json.loads(summary_path.read_text())["sha256"] == sha
    assert read_summary(entry, sha) is not None
    assert "../escape" not in (entry / "pkg" / "info" / "paths.json").read_text()
    assert verify_environment(tmp_path / "b").identical


def listed_as_files(name: str, symlinks: dict[str, str], also: tuple[str, ...] = ()) -> Crafted:
    """A package holding ``share/real/f`` and ``symlinks`` whose paths.json lists every path
    (the symlinks and ``also`` included) as a hard link."""
    listed = sorted(["share/real/f", *symlinks, *also])
    return Crafted(
        name,
        files={"share/real/f": b"f\n"},
        symlinks=symlinks,
        paths=[{"_path": path, "path_type": "hardlink"} for path in listed],
    )


def test_summaries_give_the_verdicts_of_the_entries(tmp_path: Path) -> None:
    """check_links_across over summaries refuses what a walk over every entry refuses: an
    entry under a symlink of another package, or of its own, naming that entry; a symlink
    that paths.json lists as a file counts as a symlink."""
    a = Crafted("linker", files={"share/real/keep": b"k\n"}, symlinks={"etc/conf": "../share/real"})
    b = Crafted("writer", files={"etc/conf/x": b"through the link\n", "etc/other": b"o\n"})
    c = Crafted("bystander", files={"etc/confx/y": b"a sibling, not under the link\n"})
    for pkg in (a, b, c):
        write_crafted(tmp_path / "ch", pkg)
    from rattler.package_streaming import extract

    def entry(pkg: Crafted) -> tuple[Path, EntrySummary]:
        directory = tmp_path / "x" / pkg.name
        extract(tmp_path / "ch" / "linux-64" / pkg.filename, directory)
        from envfactory.cache.pathcheck import read_paths

        return directory, summarize(directory, read_paths(pkg.name, directory))

    ea, eb, ec = entry(a), entry(b), entry(c)
    check_links_across({"linker": ea, "bystander": ec})
    with pytest.raises(UnsafePackage) as info:
        check_links_across({"linker": ea, "writer": eb, "bystander": ec})
    assert "writer: refused: paths.json entry 'etc/conf/x'" in info.value.message
    assert "lies under 'etc/conf', a symlink (linker)" in info.value.message
    # a symlink listed as a hard link: held as a symlink by the entry, so it counts
    sneaky = listed_as_files("sneaky", {"etc/conf": "../share/real"})
    write_crafted(tmp_path / "ch", sneaky)
    es = entry(sneaky)
    assert es[1].links == ["etc/conf"]
    with pytest.raises(UnsafePackage, match=r"'etc/conf/x'.*a symlink \(sneaky\)"):
        check_links_across({"sneaky": es, "writer": eb})


def test_a_package_with_a_file_under_its_own_symlink_never_enters(tmp_path: Path) -> None:
    """Within one package too, counting a symlink that paths.json lists as a file: refused
    before any file of it is looked at (an lstat under the symlink would follow it)."""
    pkg = listed_as_files("selfish", {"lib/d": "../share/real"}, also=("lib/d/f",))
    lock = crafted_lock(tmp_path, [pkg])
    cache = cache_at(tmp_path / "cache")
    with pytest.raises(UnsafePackage, match=r"'lib/d/f'.*lies under 'lib/d'"):
        create_environment(lock, tmp_path / "env", platform="linux-64", cache=cache)
    assert [p for p in (tmp_path / "cache" / "sha256").iterdir() if p.is_dir()] == []
    assert not (tmp_path / "env").exists()


def test_a_file_replaced_in_a_cache_entry_is_unpacked_again(tmp_path: Path) -> None:
    """A file replaced in an entry since it was checked (a new inode, same size) is found by
    the check before linking: the entry is retired and unpacked again, and the new prefix
    gets the package's own bytes."""
    lock = crafted_lock(tmp_path, packages())
    cache = cache_at(tmp_path / "cache")
    create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    victim = entry_of(tmp_path, "pkg1") / "pkg" / "share/pkg1/f0.txt"
    original = victim.read_bytes()
    stamp = victim.stat()
    victim.unlink()
    victim.write_bytes(b"pkg1 file X\n")  # same size, other bytes, a new inode
    os.utime(victim, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # and the old mtime
    result = create_environment(lock, tmp_path / "b", platform="linux-64", cache=cache)
    assert result.from_cache == 4
    assert (tmp_path / "b/share/pkg1/f0.txt").read_bytes() == original
    assert verify_environment(tmp_path / "b").identical


def test_the_cache_imports_nothing_posix_only_at_module_level() -> None:
    """The CLI runs on Windows hosts (DESIGN.md, decision 15): the cache and what it uses
    import with the POSIX-only modules made unimportable (locks go through
    ``envfactory.cache.filelock``, which picks ``fcntl`` or ``msvcrt`` when it locks)."""
    code = (
        "import sys\n"
        "for name in ('fcntl', 'pwd', 'grp', 'termios', 'resource'):\n"
        "    sys.modules[name] = None\n"
        "import envfactory.cache.pkgcache, envfactory.cache.filelock, envfactory.cache.pool\n"
        "import envfactory.cache.unpack, envfactory.ownfiles, envfactory.install.create\n"
        "print('imported')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr


def test_clean_extracted_keeps_archives_and_removes_the_old_layout(tmp_path: Path) -> None:
    """``cache clean --extracted`` removes entries, and the entries and sidecars of the
    <name>-<version>-<build> layout of earlier versions, and keeps the archives."""
    lock = crafted_lock(tmp_path, packages())
    cache = cache_at(tmp_path / "cache")
    create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    root = tmp_path / "cache"
    (root / "pkg0-1.0-h0_0.tar.bz2").write_bytes(b"an archive")
    (root / "old-1.0-h0_0" / "info").mkdir(parents=True)
    (root / "old-1.0-h0_0.lock").write_bytes(b"\0" * 40)
    (root / "old-1.0-h0_0.checked.json").write_text("{}")
    removed, _freed = cache.clean(archives=False, extracted=True)
    assert removed == 5 + 1
    assert (root / "pkg0-1.0-h0_0.tar.bz2").is_file()
    assert not (root / "old-1.0-h0_0").exists() and not (root / "old-1.0-h0_0.lock").exists()
    assert not (root / "old-1.0-h0_0.checked.json").exists()
    assert [p for p in (root / "sha256").iterdir() if p.is_dir()] == []
    assert verify_environment(tmp_path / "a").identical


# ------------------------------------------------------------------------------------------
# The view rattler links through: kept for the next create of the same lock


def _views(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "views").glob("*[0-9a-f]"))


def test_a_second_create_of_the_same_lock_links_through_the_kept_view(tmp_path: Path) -> None:
    """The first create makes the view (one directory under views/), the second links through
    it as it is: nothing made, nothing removed; both prefixes are the lock's, their records
    name the entries, not the view."""
    lock = crafted_lock(tmp_path, packages())
    cache = cache_at(tmp_path / "cache")
    create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    (view,) = _views(tmp_path)
    before = {p.name: p.lstat().st_ino for p in view.iterdir()}
    create_environment(lock, tmp_path / "b", platform="linux-64", cache=cache)
    assert _views(tmp_path) == [view]
    assert {p.name: p.lstat().st_ino for p in view.iterdir()} == before
    assert not list((tmp_path / "cache" / STAGING).iterdir())
    for env in ("a", "b"):
        assert verify_environment(tmp_path / env).identical
        record = json.loads((tmp_path / env / "conda-meta" / "pkg0-1.0-h0_0.json").read_text())
        assert record["extracted_package_dir"] == str(entry_of(tmp_path, "pkg0") / "pkg")


@pytest.mark.parametrize("change", ["link", "lock-file", "missing", "symlinked-view"])
def test_a_kept_view_that_differs_is_not_linked_through(tmp_path: Path, change: str) -> None:
    """A kept view whose link points elsewhere, whose rattler lock file names another archive,
    that lacks a package, or that is a symlink itself, is not used: the create links through
    a view of its own (removed after it) and the prefix is the lock's."""
    lock = crafted_lock(tmp_path, packages())
    cache = cache_at(tmp_path / "cache")
    create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    (view,) = _views(tmp_path)
    if change == "link":
        (view / "pkg0-1.0-h0_0").unlink()
        (view / "pkg0-1.0-h0_0").symlink_to(entry_of(tmp_path, "pkg1") / "pkg")
    elif change == "lock-file":
        (view / "pkg0-1.0-h0_0.lock").write_bytes(b"\0" * 8 + b"\1" * 32)
    elif change == "missing":
        (view / "pkg0-1.0-h0_0").unlink()
    else:
        real = view.with_name("elsewhere")
        view.rename(real)
        view.symlink_to(real)

    def state() -> dict[str, object]:
        """The views and entries as they are: each path with its inode, link or bytes."""
        out: dict[str, object] = {}
        for top in ("views", "sha256"):
            for path in sorted((tmp_path / "cache" / top).rglob("*")):
                st = path.lstat()
                out[str(path)] = (st.st_ino, st.st_size, st.st_mtime_ns)
        return out

    before = state()
    create_environment(lock, tmp_path / "b", platform="linux-64", cache=cache)
    # rattler neither extracted into the view nor wrote through it into an entry
    assert state() == before
    assert verify_environment(tmp_path / "b").identical
    assert (tmp_path / "b/share/pkg0/f0.txt").read_bytes() == b"pkg0 file 0\n"
    assert not list((tmp_path / "cache" / STAGING).iterdir())


def test_clean_removes_the_kept_views(tmp_path: Path) -> None:
    lock = crafted_lock(tmp_path, packages())
    cache = cache_at(tmp_path / "cache")
    create_environment(lock, tmp_path / "a", platform="linux-64", cache=cache)
    assert len(_views(tmp_path)) == 1
    cache.clean(archives=False, extracted=True)
    assert _views(tmp_path) == []
    create_environment(lock, tmp_path / "b", platform="linux-64", cache=cache)
    assert verify_environment(tmp_path / "b").identical


def test_a_record_is_pointed_at_its_entry_in_place_never_through_a_link(tmp_path: Path) -> None:
    """The path of the view a record names is replaced in place (``ownfiles.replace_in_file``,
    what create does to each record rattler wrote) with exactly the bytes a full rewrite gives,
    by a shorter or a longer path; a record that is a symlink is refused and what it points to
    is left alone; a missing record or one without the path is left as it is."""
    view, entry = "/c/views/k/a-1-0-h0_0", "/c/sha256/s/pkg"
    raw = json.dumps(
        {"extracted_package_dir": view, "files": ["x"] * 50, "link": {"source": view}}, indent=1
    ).encode()
    meta = tmp_path / "conda-meta"
    meta.mkdir()
    for new in (entry, entry + "/longer/than/the/view/it/replaces"):
        record = meta / "a.json"
        record.write_bytes(raw)
        assert ownfiles.replace_in_file(record, view.encode(), new.encode())
        assert record.read_bytes() == raw.replace(view.encode(), new.encode())
    assert not ownfiles.replace_in_file(meta / "a.json", b"/not/there", b"/x")
    assert not ownfiles.replace_in_file(meta / "missing.json", view.encode(), entry.encode())
    assert not (meta / "missing.json").exists()
    outside = tmp_path / "outside.json"
    outside.write_bytes(raw)
    (meta / "b.json").symlink_to(outside)
    with pytest.raises(ownfiles.LinkRefused):
        ownfiles.replace_in_file(meta / "b.json", view.encode(), entry.encode())
    assert outside.read_bytes() == raw
