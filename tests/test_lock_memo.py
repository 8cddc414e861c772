"""The parsed-lock memo (``lockfile.load_document(path, memo)``): a warm ``create`` reads the lock
it parsed before as JSON, by the sha256 of the file's text, instead of importing PyYAML and
parsing the YAML again (issue 11). What is read must equal what the YAML says, an edited lock
must be read again, and the checks of ``read_lock`` run on a kept document as on a parsed one.

Inputs: the real third-party conda-lock files of tests/data/real-envs (sources in its
SOURCES.md) and the lock envfactory 0.1 wrote (tests/data/locks)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.errors import UserInputError
from envfactory.lockfile import read as lockfile
from envfactory.lockfile.read import MEMO_FORMAT, load_document, read_lock

DATA = Path(__file__).parent / "data"
LOCKS = sorted((DATA / "real-envs").glob("*.conda-lock.yml")) + sorted(
    (DATA / "locks").glob("*.conda-lock.yml")
)


def key_of(path: Path) -> str:
    text = path.read_bytes().decode("utf-8-sig")
    return f"{hashlib.sha256(text.encode('utf-8')).hexdigest()}-{MEMO_FORMAT}.json"


@pytest.mark.slow
@pytest.mark.parametrize("path", LOCKS, ids=lambda p: p.name[:40])
def test_a_kept_lock_reads_as_its_yaml_reads(path: Path, tmp_path: Path) -> None:
    memo = tmp_path / "memo"
    parsed = read_lock(path)
    assert read_lock(path, memo) == parsed  # parsed, then kept
    assert [p.name for p in memo.iterdir()] == [key_of(path)]
    assert read_lock(path, memo) == parsed  # read from the memo


def test_a_hit_imports_no_yaml_parser(tmp_path: Path) -> None:
    path = LOCKS[0]
    script = (
        "import sys; from pathlib import Path; from envfactory.lockfile.read import read_lock; "
        f"read_lock(Path({str(path)!r}), Path({str(tmp_path)!r})); print('yaml' in sys.modules)"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    ]
    assert runs == ["True", "False"]


def test_an_edited_lock_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "conda-lock.yml"
    shutil.copy(LOCKS[0], path)
    memo = tmp_path / "memo"
    before = read_lock(path, memo)
    text = path.read_text(encoding="utf-8")
    first = before.packages[0]
    assert text.count(f"url: {first.url}") == 1
    edited = first.url.replace("://", "://mirror.", 1)
    path.write_text(text.replace(f"url: {first.url}", f"url: {edited}"), encoding="utf-8")
    after = read_lock(path, memo)
    assert after.packages[0].url == edited and before.packages[0].url == first.url
    assert len(list(memo.iterdir())) == 2


def test_the_checks_run_on_a_kept_document(tmp_path: Path) -> None:
    """A memo is as trusted as the package cache it lives in, yet a kept document still goes
    through every check of read_lock: one whose URL would add an option line to pip's
    requirements file is refused, as it would be from the YAML."""
    path = LOCKS[0]
    memo = tmp_path / "memo"
    read_lock(path, memo)
    kept = memo / key_of(path)
    doc = json.loads(kept.read_text(encoding="utf-8"))
    package = doc["package"][0]
    package["url"] = package["url"] + "\n--index-url https://evil.example/simple"
    kept.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(UserInputError) as info:
        read_lock(path, memo)
    assert str(path) in info.value.message


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", ""])
def test_a_broken_memo_is_parsed_again_and_replaced(tmp_path: Path, content: str) -> None:
    path = LOCKS[0]
    memo = tmp_path / "memo"
    memo.mkdir()
    (memo / key_of(path)).write_text(content, encoding="utf-8")
    assert read_lock(path, memo) == read_lock(path)
    assert isinstance(json.loads((memo / key_of(path)).read_text(encoding="utf-8")), dict)


def test_a_document_json_cannot_hold_exactly_is_not_kept(tmp_path: Path) -> None:
    """A NaN (JSON has none) or an integer key would come back from JSON as something else."""
    memo = tmp_path / "memo"
    for i, text in enumerate(["version: 1\nwhen: .nan\n", "version: 1\n7: seven\n"]):
        path = tmp_path / f"l{i}.yml"
        path.write_text(text, encoding="utf-8")
        first = load_document(path, memo)
        assert load_document(path, memo) == first
    assert not memo.exists() or list(memo.iterdir()) == []


def test_the_least_recently_used_go_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(lockfile, "MEMO_KEEP", 2)
    memo = tmp_path / "memo"
    paths = LOCKS[:3]
    assert len(paths) == 3
    read_lock(paths[0], memo)
    read_lock(paths[1], memo)
    os.utime(memo / key_of(paths[0]), ns=(1, 1))  # used long ago
    os.utime(memo / key_of(paths[1]), ns=(2, 2))
    read_lock(paths[1], memo)  # a hit: now the most recently used
    read_lock(paths[2], memo)  # a miss: kept, and the oldest dropped
    assert sorted(p.name for p in memo.iterdir()) == sorted(key_of(p) for p in paths[1:])


def test_an_unwritable_memo_is_gone_without(tmp_path: Path) -> None:
    blocker = tmp_path / "memo"
    blocker.write_text("a file where the directory would be", encoding="utf-8")
    assert read_lock(LOCKS[0], blocker) == read_lock(LOCKS[0])


@pytest.mark.parametrize("planted", ["world-writable file", "group-writable folder", "other uid"])
def test_a_memo_someone_else_could_write_is_not_read(tmp_path: Path, planted: str) -> None:
    """Issue 28: a parsed lock planted in the memo under a genuine lock's key made create use
    the planted document. A memo is read only when this user owns it and nobody else can write
    it or its folder; otherwise the YAML is parsed (and the memo written anew)."""
    import os

    path = LOCKS[0]
    memo = tmp_path / "memo"
    genuine = read_lock(path)
    read_lock(path, memo)
    kept = memo / key_of(path)
    doc = json.loads(kept.read_text(encoding="utf-8"))
    package = doc["package"][0]
    package["url"] = package["url"].replace("://", "://planted.", 1)
    kept.write_text(json.dumps(doc), encoding="utf-8")
    assert read_lock(path, memo) != genuine  # this user's own memo is trusted: it is read
    if planted == "world-writable file":
        kept.chmod(0o666)
    elif planted == "group-writable folder":
        memo.chmod(0o775)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another uid needs root")
        os.chown(kept, 1001, 1001)
    assert read_lock(path, memo) == genuine
