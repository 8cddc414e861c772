"""The compiled data files (envfactory/compiled.py: the catalog, the GPU table, explain's
patterns) are caches of a checked YAML load, never a second source: the committed files hold
what a fresh load of the YAML gives, their bytes do not depend on the hash seed, and an edited
data file or a changed record class makes them stale, so the YAML is read again (with its
file:line errors)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory import compiled
from envfactory.catalog import gpus, loader
from envfactory.catalog.loader import (
    COMPILED,
    DATA_DIR,
    DATA_FILES,
    RECORDS,
    load_catalog,
    load_catalog_from,
    load_from_texts,
)
from envfactory.diagnose import explain
from envfactory.errors import CatalogError

REGENERATE = f"run '{compiled.REGENERATE}' after editing envfactory/data/*.yaml"
OWNERS = (loader, gpus, explain)


def test_committed_files_are_what_the_yaml_gives() -> None:
    for owner in OWNERS:
        path, fresh = owner.DATA.form()
        assert path.read_bytes() == fresh, f"{path.name} is stale: {REGENERATE}"


def test_the_catalog_every_command_reads_equals_a_fresh_yaml_load() -> None:
    from_yaml = load_catalog_from(DATA_DIR)
    assert load_catalog() == from_yaml
    texts = {n: (DATA_DIR / n).read_bytes() for n in DATA_FILES}
    assert compiled.read(COMPILED, texts, RECORDS) == from_yaml
    table_text = (DATA_DIR / gpus.DATA_FILE).read_text(encoding="utf-8")
    assert gpus.gpu_table() == gpus.load_table(table_text, gpus.DATA_FILE)
    patterns_text = (DATA_DIR / explain.DATA_FILE).read_text(encoding="utf-8")
    assert explain.table() == explain._load(patterns_text, explain.DATA_FILE)


def test_every_compiled_pattern_compiles_as_the_yaml_load_did() -> None:
    """explain compiles a pattern when a log first reaches it; the compiled table holds each
    as text: every one compiles, to the same regex the checked load made."""
    patterns_text = (DATA_DIR / explain.DATA_FILE).read_text(encoding="utf-8")
    fresh = explain._load(patterns_text, explain.DATA_FILE)
    shipped = explain.table()
    assert shipped is not fresh
    for new, old in zip(shipped.problems, fresh.problems, strict=True):
        for a, b in zip(
            (*new.regexes, *new.weak_regexes, *new.unless_log_has),
            (*old.regexes, *old.weak_regexes, *old.unless_log_has),
            strict=True,
        ):
            assert a.pattern == b.pattern
            assert a.search("") == b.search("")  # compiles (re.error would raise here)


@pytest.mark.parametrize("seed", ["1", "2", "random"])
def test_bytes_do_not_depend_on_the_hash_seed(seed: str) -> None:
    code = (
        "import hashlib\n"
        "from envfactory.catalog import gpus, loader\n"
        "from envfactory.diagnose import explain\n"
        "for owner in (loader, gpus, explain):\n"
        "    path, data = owner.DATA.form()\n"
        "    print(path.name, hashlib.sha256(data).hexdigest())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": seed},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    expected = "".join(
        f"{p.name} {hashlib.sha256(p.read_bytes()).hexdigest()}\n"
        for p in (COMPILED, gpus.COMPILED, explain.COMPILED)
    )
    assert out == expected


def test_an_edited_data_file_makes_it_stale() -> None:
    texts = {n: (DATA_DIR / n).read_bytes() for n in DATA_FILES}
    assert compiled.read(COMPILED, texts, RECORDS) is not None
    edited = dict(texts)
    edited["constraints.yaml"] = texts["constraints.yaml"] + b"\n# a user's edit\n"
    assert compiled.read(COMPILED, edited, RECORDS) is None


def test_a_changed_record_class_makes_it_stale() -> None:
    texts = {n: (DATA_DIR / n).read_bytes() for n in DATA_FILES}

    @dataclasses.dataclass(frozen=True)
    class Source:  # same name as the model's, one more field
        id: str
        citation: str
        url: str
        added: str

    changed = tuple(Source if c.__name__ == "Source" else c for c in RECORDS)
    assert compiled.fingerprint(texts, changed) != compiled.fingerprint(texts, RECORDS)
    assert compiled.read(COMPILED, texts, changed) is None


def test_a_missing_or_foreign_file_is_not_used(tmp_path: Path) -> None:
    texts = {n: (DATA_DIR / n).read_bytes() for n in DATA_FILES}
    assert compiled.read(tmp_path / "none.pickle", texts, RECORDS) is None
    other = tmp_path / "other.pickle"
    other.write_bytes(b"not a compiled catalog\n" + COMPILED.read_bytes())
    assert compiled.read(other, texts, RECORDS) is None


def test_an_edited_yaml_is_still_checked_with_file_and_line(tmp_path: Path) -> None:
    """What the compiled form skips is only ever skipped for the exact bytes it was made from:
    a broken edit still fails as before."""
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    combos = data / "combos.yaml"
    combos.write_text(
        combos.read_text(encoding="utf-8").replace(
            "  tf114-cuda100:\n", "  tf114-cuda100:\n    colour: red\n", 1
        ),
        encoding="utf-8",
    )
    texts = {n: (data / n).read_bytes() for n in DATA_FILES}
    assert compiled.read(COMPILED, texts, RECORDS) is None
    with pytest.raises(CatalogError, match=r"combos\.yaml:\d+: .*colour"):
        load_from_texts(texts, str(data))
