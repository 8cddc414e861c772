"""recommend: runnable combos, native before JIT, each with why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from envfactory.catalog.gpus import parse_capability
from envfactory.catalog.loader import load_catalog
from envfactory.diagnose.compat import GpuSpec, check, parse_driver
from envfactory.diagnose.recommend import parse_tf_filter, recommend

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")


def test_native_before_jit_and_every_entry_really_runs() -> None:
    catalog = load_catalog()
    gpu = GpuSpec(parse_capability("8.6"), "GeForce RTX 3080")
    result = recommend(catalog, [gpu], "linux-64", parse_driver("535.104.05"))
    verdicts = [c.assessment.verdict for c in result.candidates]
    assert verdicts and set(verdicts) <= {"supported", "ptx-jit"}
    assert verdicts == sorted(verdicts, key=lambda v: v != "supported")
    for c in result.candidates:
        again = check(catalog, c.combo, gpu, "linux-64", parse_driver("535.104.05"))
        assert again.verdict == c.assessment.verdict
    assert all(not c.combo.name.startswith("tf11") for c in result.candidates)


def test_tf_filter_and_tf1_on_pascal() -> None:
    catalog = load_catalog()
    result = recommend(
        catalog, [GpuSpec(parse_capability("6.1"))], "win-64", None, parse_tf_filter("1")
    )
    names = [c.combo.name for c in result.candidates]
    assert "tf114-cuda100" in names and all(n.startswith("tf1") for n in names)


def test_h200_gets_jit_only_combos_and_no_cuda10() -> None:
    catalog = load_catalog()
    result = recommend(
        catalog, [GpuSpec(parse_capability("9.0"))], "linux-64", parse_driver("580.159.04")
    )
    names = [c.combo.name for c in result.candidates]
    assert "tf215-cuda122" in names and "tf114-cuda100" not in names
    assert {c.assessment.verdict for c in result.candidates} == {"ptx-jit"}


def test_cli_recommend_json() -> None:
    done = subprocess.run(
        [ENVFACTORY, "recommend", "--gpu", "RTX 4090", "--tf", "2.15", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [c["combo"] for c in data["combos"]] == ["tf215-cuda122"]
    assert data["combos"][0]["verdict"] == "supported" and data["combos"][0]["why"]
