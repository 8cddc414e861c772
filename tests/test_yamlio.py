"""The YAML reader (libyaml): one typing rule, checked against PyYAML (YAML 1.1) and ruamel (YAML
1.2); it reads every data file exactly as ruamel's YAML 1.2 parser does, keeps file:line for
every error, refuses what would hurt (duplicate keys, alias bombs, deep nesting, non-string
keys), and its partial read stops at the keys it was asked for."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from envfactory.catalog.loader import DATA_DIR
from envfactory.errors import CatalogError, UserInputError
from envfactory.yamlio import (
    LIBYAML,
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    YamlMap,
    YamlReader,
    YamlSeq,
    load_plain,
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


# Plain scalars where YAML 1.1 and 1.2 part ways, and some where they agree.
PLAIN_SCALARS = [
    "yes", "no", "on", "off", "Yes", "y", "n",  # 1.1: bools (PyYAML: not y/n)
    "010", "007", "0o17", "0b101", "1_000", "1:20", "-0x1F",  # 1.1 vs 1.2 ints
    "1e3", "1E3", "1.5e3", "1.0e+20", "1.5e-3", "-.5", "+.5", ".5", "1.", "01.5",  # floats
    "2021-01-01", "2001-12-14t21:59:43.10-05:00",  # 1.1: timestamps
    "10", "-7", "+3", "0", "0x1F", "10.0", "-1.5", ".inf", "-.inf", ".NaN",
    "true", "False", "TRUE", "null", "~", "Null",
    "1.10", "abc", "0e1234567890123456789012345678",  # an md5 that 1.2 reads as 0.0
]  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    """Equal, of the same type (True is not 1), NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


def core_1_2(text: str) -> Any:
    """A plain scalar under the YAML 1.2 core schema, transcribed from the spec's table
    (https://yaml.org/spec/1.2.2/#1032-tag-resolution). ruamel is no reference here: it reads
    1_000, 0b101 and dates as 1.1 does."""
    if re.fullmatch(r"null|Null|NULL|~|", text):
        return None
    if re.fullmatch(r"true|True|TRUE|false|False|FALSE", text):
        return text.lower() == "true"
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"0o[0-7]+", text):
        return int(text[2:], 8)
    if re.fullmatch(r"0x[0-9a-fA-F]+", text):
        return int(text[2:], 16)
    if re.fullmatch(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", text):
        return float(text)
    if re.fullmatch(r"[-+]?(\.inf|\.Inf|\.INF)", text):
        return -math.inf if text[0] == "-" else math.inf
    if re.fullmatch(r"\.nan|\.NaN|\.NAN", text):
        return math.nan
    return text


@pytest.mark.parametrize("text", PLAIN_SCALARS)
def test_a_plain_scalar_is_typed_only_where_yaml_1_1_and_1_2_agree(text: str) -> None:
    """The one typing rule (yamlio's docstring), against YAML 1.1 as PyYAML's SafeLoader reads
    it (conda-lock's reader) and the YAML 1.2 core schema: where they read the same value, so
    do we; elsewhere the text."""
    import yaml as pyyaml

    document = f"k: {text}\n"
    v11 = pyyaml.load(document, Loader=pyyaml.SafeLoader)["k"]
    v12 = core_1_2(text)
    expected = v11 if _same(v11, v12) else text
    assert _same(load_yaml("t.yaml", document)["k"], expected)
    assert _same(load_plain("t.yaml", document, "")["k"], expected)


def test_the_cases_where_yaml_1_1_and_1_2_differ_are_in_the_table() -> None:
    """The table above holds both kinds of case, so the rule is tested where it matters."""
    import yaml as pyyaml

    def both(text: str) -> tuple[Any, Any]:
        return pyyaml.load(f"k: {text}\n", Loader=pyyaml.SafeLoader)["k"], core_1_2(text)

    differ = [t for t in PLAIN_SCALARS if not _same(*both(t))]
    assert {"yes", "010", "0o17", "1e3", "-.5", "1_000", "2021-01-01"} <= set(differ)
    assert len(differ) >= 15 and len(PLAIN_SCALARS) - len(differ) >= 15


def test_explicit_tags_and_quotes_decide_the_type() -> None:
    doc = load_yaml("t.yaml", "a: '10.0'\nb: !!str 10.0\nc: !!int '010'\nd: !!float 1\ne: |\n  x\n")
    assert doc == {"a": "10.0", "b": "10.0", "c": 10, "d": 1.0, "e": "x\n"}


# Text without YAML's other line breaks (NEL, LS, PS: a writer may fold them into a space, which
# is about line breaks, not types) and lone surrogates (not UTF-8).
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\x85\u2028\u2029"))


def json_like(floats: st.SearchStrategy[float]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none() | st.booleans() | st.integers() | floats | TEXT,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
        max_leaves=20,
    )


# ruamel writes a float as repr() gives it: 1e-05, without the dot YAML 1.1 wants, which the
# rule (like PyYAML) reads as text (test below). Nothing envfactory reads holds one.
DOTTED = st.floats(allow_nan=False).filter(lambda f: "e" not in repr(f))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(value=json_like(st.floats(allow_nan=False)), ruamel_value=json_like(DOTTED))
def test_what_pyyaml_and_ruamel_write_reads_back_as_written(value: Any, ruamel_value: Any) -> None:
    """Either library (PyYAML: conda-lock's writer; ruamel) quotes what its own YAML version
    would read as another type; under the one rule every plain scalar either writes reads
    back as the value it wrote. YAML 1.2 alone would read PyYAML's plain ``1e3`` as a float,
    YAML 1.1 alone ruamel's plain ``yes`` as a bool."""
    import yaml as pyyaml

    document = {"k": value}
    by_pyyaml = pyyaml.safe_dump(document, allow_unicode=True)
    assert load_plain("p.yaml", by_pyyaml, "") == document
    stream = io.StringIO()
    YAML(typ="safe", pure=True).dump({"k": ruamel_value}, stream)
    # ruamel writes a flow-mapping key such as '?0' plain ({?0: null}), which ruamel itself and
    # PyYAML read back as the explicit key 0: the writer's own slip, not the rule's
    assume(YAML(typ="safe", pure=True).load(stream.getvalue()) == {"k": ruamel_value})
    assert load_plain("r.yaml", stream.getvalue(), "") == {"k": ruamel_value}


def test_a_float_ruamel_writes_without_a_dot_is_text() -> None:
    """The rule's one known miss on a writer's output: YAML 1.1 (PyYAML) reads ruamel's
    ``1e-05`` as text, so it stays text."""
    stream = io.StringIO()
    YAML(typ="safe", pure=True).dump({"k": 1e-05}, stream)
    assert load_plain("r.yaml", stream.getvalue(), "") == {"k": "1e-05"}


@pytest.mark.parametrize("text", ["1e3", "0o17", "-.5", "1.0e5", "0e1234567", "yes", "1:20"])
def test_one_writer_or_the_other_writes_these_strings_plain(text: str) -> None:
    """The strings on which a single YAML version would misread a writer's output are really
    written without quotes by one of them (so the round trip above is not vacuous for them),
    and read back as strings."""
    import yaml as pyyaml

    stream = io.StringIO()
    YAML(typ="safe", pure=True).dump({"k": text}, stream)
    written = [pyyaml.safe_dump({"k": text}), stream.getvalue()]
    assert f"k: {text}\n" in written or f"{{k: {text}}}\n" in written, written
    assert all(load_plain("t.yaml", w, "") == {"k": text} for w in written)


def test_plain_reading_keeps_the_limits_and_names_the_error_class() -> None:
    """``load_plain`` refuses what ``load_yaml`` refuses, as the error class it is given."""
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]")
    with pytest.raises(UserInputError, match="an alias bomb"):
        load_plain("bomb.yml", "\n".join(lines) + "\n", "regenerate it")
    deep = "a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n"
    with pytest.raises(UserInputError, match=f"deep.yml:1: YAML nests deeper than {MAX_DEPTH}"):
        load_plain("deep.yml", deep, "regenerate it")
    with pytest.raises(UserInputError, match="key 'a' appears twice") as info:
        load_plain("twice.yml", "a: 1\na: 2\n", "regenerate it")
    assert info.value.hint == "regenerate it"
    with pytest.raises(UserInputError, match=r"bad.yml:3: not valid YAML"):
        load_plain("bad.yml", "a: [1,\nb: 2\n", "regenerate it")
    assert type(load_plain("t.yml", "a: {b: [1]}\n", "")["a"]) is dict


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
