"""The YAML reader (libyaml): it reads every data file exactly as ruamel's YAML 1.2 parser does,
keeps file:line for every error, refuses what would hurt (duplicate keys, alias bombs, deep
nesting, non-string keys), and its partial read stops at the keys it was asked for."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from envfactory.catalog.loader import DATA_DIR
from envfactory.errors import CatalogError
from envfactory.yamlio import (
    LIBYAML,
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    YamlMap,
    YamlReader,
    YamlSeq,
    load_yaml,
    load_yaml_keys,
)

ROOT = Path(__file__).resolve().parent.parent
REAL_LOCK = (
    Path(__file__).parent
    / "data"
    / "real-envs"
    / "tf2.10.0-cuda11.2-linux64-condalock--pangeo-data-pangeo-docker-images.conda-lock.yml"
)


def plain(value: Any) -> Any:
    """ruamel's round-trip nodes and ours, as plain dicts and lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def ruamel_lines(doc: Any, out: list[tuple[str, int]], where: str = "") -> None:
    """Every key's line as ruamel reports it, by path."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.append((f"{where}/{key}", doc.lc.key(key)[0] + 1))  # type: ignore[attr-defined]
            ruamel_lines(value, out, f"{where}/{key}")
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            ruamel_lines(value, out, f"{where}/{index}")


def our_lines(doc: Any, out: list[tuple[str, int]], where: str = "") -> None:
    if isinstance(doc, YamlMap):
        for key, value in doc.items():
            out.append((f"{where}/{key}", doc.key_line(key)))
            our_lines(value, out, f"{where}/{key}")
    elif isinstance(doc, YamlSeq):
        for index, value in enumerate(doc):
            our_lines(value, out, f"{where}/{index}")


def test_libyaml_is_the_parser() -> None:
    # PyYAML wheels ship libyaml on every platform envfactory supports; without it the loader
    # still works, 30x slower: this would be the first sign.
    assert LIBYAML


DATA_FILES = [*sorted(DATA_DIR.glob("*.yaml")), ROOT / "examples" / "tf1-tf2" / "envfactory.yaml"]


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda p: p.name)
def test_every_data_file_reads_as_ruamel_reads_it(path: Path) -> None:
    """An independent parser (ruamel, YAML 1.2, what the loader used before) gives the same
    values and the same line for every key."""
    text = path.read_text(encoding="utf-8")
    ours = load_yaml(path.name, text)
    theirs = YAML(typ="rt").load(io.StringIO(text))
    assert plain(ours) == plain(theirs)
    ours_lines: list[tuple[str, int]] = []
    theirs_lines: list[tuple[str, int]] = []
    our_lines(ours, ours_lines)
    ruamel_lines(theirs, theirs_lines)
    assert ours_lines == theirs_lines


def test_scalars_are_typed_by_the_yaml_1_2_core_schema() -> None:
    doc = load_yaml(
        "t.yaml",
        "a: 10.0\nb: '10.0'\nc: !!str 10.0\nd: yes\ne: 010\nf: 0o17\ng: 0x1F\nh: ~\ni:\n"
        "j: true\nk: .inf\nl: -.5\nm: 1e3\nn: off\no: |\n  text\n",
    )
    assert doc == {
        "a": 10.0,
        "b": "10.0",
        "c": "10.0",
        "d": "yes",  # YAML 1.1 (PyYAML's own loader) would say True
        "e": 10,  # YAML 1.1 would say 8
        "f": 15,
        "g": 31,
        "h": None,
        "i": None,
        "j": True,
        "k": math.inf,
        "l": -0.5,
        "m": 1000.0,
        "n": "off",
        "o": "text\n",
    }


def test_a_key_given_twice_is_refused_with_its_line() -> None:
    with pytest.raises(CatalogError) as info:
        load_yaml("t.yaml", "a: 1\nb:\n  c: 1\n  c: 2\n")
    assert info.value.message == "t.yaml:4: key 'c' appears twice in this mapping"


def test_syntax_errors_name_the_line() -> None:
    with pytest.raises(CatalogError) as info:
        load_yaml("t.yaml", "a: 1\nb: [1, 2\nc: 3\n")
    assert info.value.message.startswith("t.yaml:3: not valid YAML: ")


def test_an_alias_bomb_is_refused_before_it_grows() -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]")
    with pytest.raises(CatalogError) as info:
        load_yaml("bomb.yaml", "\n".join(lines) + "\n")
    assert f"aliases expand to more than {MAX_ALIAS_NODES} nodes" in info.value.message
    # a few aliases are fine
    assert load_yaml("ok.yaml", "a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}


def test_nesting_beyond_the_limit_is_refused_with_a_line() -> None:
    deep = "a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n"
    with pytest.raises(CatalogError) as info:
        load_yaml("deep.yaml", deep)
    assert info.value.message == f"deep.yaml:1: YAML nests deeper than {MAX_DEPTH} levels"
    assert info.value.hint and "alias bombs" in info.value.hint
    # libyaml's own limit (1000 levels) is reported the same way, not as a crash
    with pytest.raises(CatalogError) as info:
        load_yaml("deeper.yaml", "[" * 20000)
    assert info.value.message == f"deeper.yaml:1: YAML nests deeper than {MAX_DEPTH} levels"
    # at the limit it loads
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert load_yaml("ok.yaml", at_limit) is not None


def test_merge_keys_and_complex_keys_are_refused() -> None:
    with pytest.raises(CatalogError, match="merge keys"):
        load_yaml("t.yaml", "base: &b {x: 1}\nc:\n  <<: *b\n")
    with pytest.raises(CatalogError, match=r"t\.yaml:1: a key is a list or mapping"):
        load_yaml("t.yaml", "? [1, 2]\n: x\n")


def test_plain_keys_keep_their_type_and_line() -> None:
    """``null:`` stays None (never the name 'None'); the project loader refuses it by line."""
    doc = load_yaml("m.yaml", "environments:\n  null: {}\n  3.7: {}\n  '3.8': {}\n")
    table = YamlReader("m.yaml").mapping(doc, "top", {"environments"})["environments"]
    assert list(table) == [None, 3.7, "3.8"]
    assert [table.key_line(k) for k in table] == [2, 3, 4]


def test_partial_read_stops_at_the_keys_asked_for() -> None:
    text = "version: 1\nmetadata:\n  platforms: [linux-64]\npackage: [1, 2\n"  # broken after
    top = load_yaml_keys("lock.yml", text, ["metadata"])
    assert top == {"metadata": {"platforms": ["linux-64"]}}
    assert top is not None and top.key_line("metadata") == 2
    assert top["metadata"].key_line("platforms") == 3
    # the full reader sees the broken package list
    with pytest.raises(CatalogError, match=r"lock\.yml:5: not valid YAML"):
        load_yaml("lock.yml", text)


def test_partial_read_skips_what_comes_before_and_follows_aliases() -> None:
    text = "package:\n- {name: a, deps: &d [x]}\nmetadata:\n  deps: *d\n"
    assert load_yaml_keys("t.yml", text, ["metadata"]) == {"metadata": {"deps": ["x"]}}
    assert load_yaml_keys("t.yml", "", ["metadata"]) is None
    assert load_yaml_keys("t.yml", "- a\n", ["metadata"]) is None
    assert load_yaml_keys("t.yml", "a: 1\n", ["metadata"]) == {}


def test_partial_read_of_a_real_lock_matches_the_full_read() -> None:
    text = REAL_LOCK.read_text(encoding="utf-8")
    top = load_yaml_keys(REAL_LOCK.name, text, ["metadata"])
    full = load_yaml(REAL_LOCK.name, text)
    assert top is not None and top["metadata"] == full["metadata"]
    assert top.key_line("metadata") == full.key_line("metadata")
