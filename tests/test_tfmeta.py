"""The generated table of TensorFlow's declared requirements (envfactory/data/tf-requires.json,
scripts/tf-requires) and the bounds of data/constraints.yaml held to it and to their sources."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envfactory.catalog import tfmeta
from envfactory.catalog.loader import load_catalog

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "envfactory" / "data" / tfmeta.TABLE_NAME
METADATA = Path(__file__).parent / "data" / "pypi" / "metadata"
SCRIPT = ROOT / "scripts" / "tf-requires"


def test_real_wheel_metadata_becomes_the_committed_rows() -> None:
    """Four METADATA files as PyPI serves them (tests/data/pypi/metadata/, fetched with the
    script's own readers on 2026-12-03: one PEP 658 '.metadata' file, three by its range reads
    of the wheel, as those wheels have no '.metadata' file) give the rows the committed table
    holds for those wheels."""
    committed = json.loads(TABLE.read_text(encoding="utf-8"))["distributions"]["tensorflow"]
    for path in sorted(METADATA.glob("*.metadata")):
        filename = path.name.removesuffix(".metadata")
        [row] = tfmeta.group_release([(filename, path.read_text(encoding="utf-8"))])
        version = tfmeta.wheel_version(filename)
        [tag] = row["wheels"]
        stored = [r for r in committed[version] if tag in r["wheels"]]
        assert len(stored) == 1, filename
        assert stored[0]["requires"] == row["requires"]
        assert stored[0]["requires_python"] == row["requires_python"]


def test_the_committed_table_is_what_the_generator_writes() -> None:
    """Sorted, deterministic, self-describing: rewriting the committed rows through the
    generator gives the committed bytes (so nobody edited it by hand)."""
    doc = json.loads(TABLE.read_text(encoding="utf-8"))
    assert doc["generated_by"].startswith("scripts/tf-requires")
    assert tfmeta.table_text(doc["distributions"], doc["retrieved"]) == TABLE.read_text(
        encoding="utf-8"
    )
    assert set(doc["distributions"]) == set(tfmeta.DISTRIBUTIONS)


def test_the_table_holds_what_the_issue_names() -> None:
    """TF 2.4.0 declares numpy~=1.19.2 and tensorflow-estimator<2.5.0 (the bounds audit missed
    before the table); tensorflow 2.10 pulls tensorflow-intel on Windows for some wheels."""
    [linux] = [d for d in tfmeta.declared("tensorflow", "2.4.0", "3.8", "linux-64")
               if d.requirement.name == "numpy"]  # fmt: skip
    assert str(linux.requirement.specifier) == "~=1.19.2"
    assert "retrieved" in linux.source and "manylinux" in linux.wheel
    estimator = [
        d for d in tfmeta.declared("tensorflow", "2.4.0", "3.8", "win-64")
        if d.requirement.name == "tensorflow-estimator"
    ]  # fmt: skip
    assert str(estimator[0].requirement.specifier) == "<2.5.0,>=2.4.0rc0"
    rows = tfmeta.variants("tensorflow", "2.10.0")
    assert any("tensorflow-intel==2.10.0" in r for v in rows for r in v.requires)
    assert len(tfmeta.versions("tensorflow-intel")) > 10


def test_markers_are_evaluated_for_the_environment() -> None:
    # tensorflow-gpu 1.9.0's py2 wheels declare enum34 / backports.weakref / mock for Python 2
    py36 = {d.requirement.name for d in tfmeta.declared("tensorflow-gpu", "1.9.0", "3.6", None)}
    assert "numpy" in py36
    assert "enum34" not in py36


def _probe(spec: str) -> Version:
    """The smallest version a '<X' or '<=X' bound excludes."""
    [s] = SpecifierSet(spec)
    assert s.operator in ("<", "<="), spec
    v = Version(s.version)
    return v if s.operator == "<" else Version(f"{s.version}.post1")


def test_every_declared_bound_is_declared_by_every_release_in_its_range() -> None:
    catalog = load_catalog()
    checked = 0
    for c in catalog.constraints:
        if c.kind != "declared":
            continue
        bad = _probe(c.spec)
        releases = [
            v for v in tfmeta.versions("tensorflow")
            if not Version(v).is_prerelease and Version(v) in SpecifierSet(c.tensorflow)
        ]  # fmt: skip
        assert releases, c
        for v in releases:
            reqs = [
                d.requirement for d in tfmeta.declared("tensorflow", v, "3.8", "linux-64")
                if d.requirement.name.lower() == c.package
            ]  # fmt: skip
            assert reqs, f"tensorflow {v} declares nothing on {c.package} ({c.kind} {c.spec})"
            assert bad not in reqs[0].specifier, f"tensorflow {v}: {reqs[0]} allows {bad}"
            checked += 1
    assert checked >= 10


def test_the_protobuf_bound_matches_its_sources() -> None:
    """tensorflow#56266: protobuf 4.21 breaks TF before 2.12, and the error tells users to
    downgrade to 3.20.x: 3.20.x must be allowed, 3.21 / 4.21 not; a known breakage, not a
    lock preference and not a bound TF 2.7.0 declares (2.7.0 declares protobuf>=3.9.2)."""
    catalog = load_catalog()
    [c] = [c for c in catalog.constraints if c.package == "protobuf" and c.applies_to("2.7.0")]
    assert c.kind == "breakage"
    assert "tf-issue-56266" in c.sources
    assert c.allows("3.20.3") and c.allows("3.19.6")
    assert not c.allows("4.21.0") and not c.allows("3.21.12")
    assert c.applies_to("1.9.0") and c.applies_to("2.11.1") and not c.applies_to("2.12.0")
    [p] = [d for d in tfmeta.declared("tensorflow", "2.7.0", "3.8", "linux-64")
           if d.requirement.name == "protobuf"]  # fmt: skip
    assert Version("4.21.0") in p.requirement.specifier


@pytest.mark.network
def test_the_table_regenerates_from_pypi(tmp_path: Path) -> None:
    """One distribution fetched again from PyPI equals the committed rows (--check)."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--only", "tensorflow-directml"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
