"""Property-based fuzzing of the readers of untrusted files (issue 10, item 11): the lock reader
(``read_lock``, which create, verify, mirror, kernel, audit and ``lock --check`` go through) and
the project manifest reader (``load_project``). Whatever the bytes, they either return a value
whose every string passed its check, or raise a ``UserInputError`` (exit 1, ``error:`` +
``hint:``) -- never another exception, which the CLI would show as an internal error.

Three kinds of input per reader: a real file with random leaves replaced or removed (the
structure stays close to valid, so the checks deep inside are reached), random bytes written
over a real file, and random YAML documents. Examples are derandomized so CI runs the same
ones; ``ENVFACTORY_FUZZ_EXAMPLES=5000`` runs that many random ones per test instead.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped,unused-ignore]
from factories import FUZZ, lock_file, paths_of
from hypothesis import given
from hypothesis import strategies as st

from envfactory import untrusted
from envfactory.errors import UserInputError
from envfactory.lockfile.read import read_lock
from envfactory.project.manifest import load_project

# Scalars an attacker would try: the characters that matter to shells, files and URLs.
pytestmark = pytest.mark.slow  # 150 examples a test; the hunt is long by design

NASTY = st.sampled_from(
    ["", "..", "../x", "/etc/passwd", "a\nb", "x' ; touch M; '", "`id`", "$(id)", "%PATH%",
     "file:///x/../y", "http://h/a b", "-r /etc/hostname", "\u201cq\u201d", "\x00", "\\",
     "null", "~", "*", "<TOKEN>", "a" * 300, "linux-64", "noarch", "win-64", "1.0", "0"]
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    NASTY,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), NASTY), inner, max_size=4),
    ),
    max_leaves=12,
)


def edited(doc: Any, path: tuple[Any, ...], value: Any, remove: bool) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    node = doc
    for step in path[:-1]:
        node = node[step]
    if remove:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


def leaves_edited(data: st.DataObject, doc: Any) -> Any:
    """``doc`` with one to three leaves (or whole subtrees) replaced by drawn values or removed."""
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(paths_of(doc)))
        remove = bool(where) and data.draw(st.booleans())
        doc = edited(doc, where, data.draw(VALUES), remove)
    return doc


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def lock_doc(test_channels: dict[str, Path], work: Path) -> dict[str, Any]:
    lock = lock_file(test_channels, "tf114-cuda100", work / "lock", platforms=["linux-64"])
    doc: dict[str, Any] = yaml.safe_load(lock.read_text())
    return doc


def check_read_lock(path: Path) -> None:
    try:
        lock = read_lock(path)
    except UserInputError as exc:
        assert exc.message
        return
    for pkg in lock.packages:  # what came through passed every check
        assert untrusted.url_problem(pkg.url) is None
        assert pkg.md5 is None or untrusted.MD5.fullmatch(pkg.md5)
        assert pkg.sha256 is None or untrusted.SHA256.fullmatch(pkg.sha256)
        name = untrusted.PIP_NAME if pkg.manager == "pip" else untrusted.CONDA_NAME
        assert name.fullmatch(pkg.name)
        if pkg.manager == "conda":
            assert untrusted.CONDA_BUILD.fullmatch(pkg.build)
            assert pkg.subdir in untrusted.KNOWN_SUBDIRS


def test_the_unfuzzed_lock_reads(lock_doc: dict[str, Any], work: Path) -> None:
    path = work / "plain.yml"
    path.write_text(yaml.safe_dump(lock_doc), encoding="utf-8")
    assert read_lock(path).packages


@FUZZ
@given(data=st.data())
def test_lock_with_a_leaf_replaced_or_removed(
    data: st.DataObject, lock_doc: dict[str, Any], work: Path
) -> None:
    doc = leaves_edited(data, lock_doc)
    path = work / "leaf.yml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    check_read_lock(path)


@FUZZ
@given(data=st.data())
def test_lock_with_random_bytes_written_over_it(
    data: st.DataObject, lock_doc: dict[str, Any], work: Path
) -> None:
    raw = bytearray(yaml.safe_dump(lock_doc).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw)))
        junk = data.draw(
            st.binary(max_size=8) | st.sampled_from([b"&a ", b"*a", b"[[[[", b"\t", b": ", b"\n- "])
        )
        cut = data.draw(st.integers(0, 8))
        raw[at : at + cut] = junk
    path = work / "bytes.yml"
    path.write_bytes(bytes(raw))
    check_read_lock(path)


@FUZZ
@given(doc=VALUES)
def test_any_yaml_document_as_a_lock(doc: Any, work: Path) -> None:
    path = work / "any.yml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    check_read_lock(path)


# --- the project manifest ------------------------------------------------------------------

MANIFEST = {
    "environments": {
        "legacy": {
            "combo": "tf114-cuda100",
            "python": "3.7",
            "platforms": ["linux-64"],
            "add": ["pandas"],
            "pip": ["requests==2.22.0"],
            "channels": ["conda-forge"],
            "variables": {"DATA": "/srv/data"},
        }
    }
}


def check_load_project(path: Path) -> None:
    try:
        project = load_project(path)
    except UserInputError as exc:
        assert exc.message
        return
    for env in project:
        assert untrusted.PLAIN_NAME.fullmatch(env.name)
        for name, value in env.variables.items():
            assert untrusted.VARIABLE_NAME.fullmatch(name)
            assert untrusted.state_value_problem(value) is None
        for text in (*env.conda, *env.pip):
            assert untrusted.text_problem(text) is None
        for channel in env.channels:
            assert untrusted.channel_problem(channel) is None


def test_the_unfuzzed_manifest_loads(work: Path) -> None:
    path = work / "envfactory.yaml"
    path.write_text(yaml.safe_dump(MANIFEST), encoding="utf-8")
    assert load_project(path).environment("legacy").variables == {"DATA": "/srv/data"}


@FUZZ
@given(data=st.data())
def test_manifest_with_a_leaf_replaced_or_removed(data: st.DataObject, work: Path) -> None:
    doc = leaves_edited(data, MANIFEST)
    path = work / "envfactory.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    check_load_project(path)


@FUZZ
@given(data=st.data())
def test_manifest_with_random_bytes_written_over_it(data: st.DataObject, work: Path) -> None:
    raw = bytearray(yaml.safe_dump(MANIFEST).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw)))
        junk = data.draw(
            st.binary(max_size=8) | st.sampled_from([b"&a ", b"*a", b"<<: *a", b"{{{", b"? "])
        )
        raw[at : at + data.draw(st.integers(0, 8))] = junk
    path = work / "envfactory.yaml"
    path.write_bytes(bytes(raw))
    check_load_project(path)
