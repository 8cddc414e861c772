"""Catalog facts held against statements the code under test did not make.

Goldens only prove that output did not change; these tests compare the catalog with independent
statements: the research notes (tests/data/research/compat-facts.yaml, copied from the project's
shared research, with NVIDIA's release-note table as source), a combo's own declared versions,
and compat's reasons for a case the verdict table alone would not pin down.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from envfactory.catalog.gpus import parse_capability
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import Combo, CondaPin, PipPin
from envfactory.diagnose.compat import GpuSpec, check

RESEARCH = Path(__file__).parent / "data" / "research" / "compat-facts.yaml"


def research_toolkit(version: str, release: str) -> dict[str, Any]:
    """The research row of the same release (``11.2.0 GA``); the notes list every update of a
    family (11.2.0, 11.2.1, 11.2.2), each with its own driver."""
    data = YAML(typ="safe").load(RESEARCH.read_text(encoding="utf-8"))
    rows = [r for r in data["cuda_toolkits"] if str(r["cuda_family"]) == version]
    lead = release.split()[0]
    same = [r for r in rows if str(r["release"]).split()[0] == lead]
    row: dict[str, Any] = (same or rows)[0]
    return row


TOOLKITS = sorted(load_catalog().toolkits)


@pytest.mark.slow
@pytest.mark.parametrize("version", TOOLKITS)
def test_toolkit_minimum_drivers_are_nvidias(version: str) -> None:
    """The driver each toolkit ships with, per OS, as NVIDIA's release notes table says."""
    toolkit = load_catalog().toolkits[version]
    row = research_toolkit(version, toolkit.release)
    assert toolkit.driver["linux"] == str(row["linux_min_driver"])
    assert toolkit.driver["windows"] == str(row["windows_min_driver"])


@pytest.mark.slow
@pytest.mark.parametrize("version", TOOLKITS)
def test_toolkit_architecture_range_is_the_researched_one(version: str) -> None:
    toolkit = load_catalog().toolkits[version]
    row = research_toolkit(version, toolkit.release)
    assert f"sm_{toolkit.min_sm.replace('.', '')}" == str(row["min_sm"]).split()[0]


def _version_of(pin: CondaPin | PipPin) -> str:
    if isinstance(pin, CondaPin):
        return pin.version
    match = re.search(r"==\s*([0-9][^\s;,]*)", pin.requirement)
    assert match, pin.requirement
    return match.group(1)


def _pins(combo: Combo, names: set[str]) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for platform, route in combo.platforms.items():
        for pin in route.all_pins():
            if pin.name in names:
                found.append((platform, pin.name, _version_of(pin)))
    return found


COMBOS = sorted(load_catalog().combos)


def _series(version: str, parts: int) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:parts])


@pytest.mark.parametrize("name", COMBOS)
def test_tensorflow_pins_are_the_combos_tensorflow(name: str) -> None:
    """tf27-cuda112 pinning tensorflow 2.8.0 is a wrong combo, whatever the goldens say."""
    combo = load_catalog().combo(name)
    pins = _pins(combo, {"tensorflow", "tensorflow-gpu", "tensorflow-base"})
    assert pins, f"{name} pins no TensorFlow on any platform"
    declared = _series(combo.tensorflow.value, 2)
    assert _series(name.split("-")[0][2:3] + "." + name.split("-")[0][3:], 2) == declared
    for platform, pin_name, version in pins:
        assert _series(version, 2) == declared, (platform, pin_name, version)


@pytest.mark.parametrize("name", COMBOS)
def test_cuda_and_cudnn_pins_are_the_combos(name: str) -> None:
    """cudatoolkit pins carry the combo's CUDA major.minor; cudnn pins the same major as the
    cuDNN TensorFlow was tested with and no lower a version (cuDNN is compatible upward within
    a major: that is why tf114-cuda100 tested with 7.4 may pin 7.6.5)."""
    combo = load_catalog().combo(name)
    assert _series(name.split("-cuda")[1][:2] + "." + name.split("-cuda")[1][2:], 2) == _series(
        combo.cuda.value, 2
    )
    for platform, _pin, version in _pins(combo, {"cudatoolkit", "cuda-version"}):
        assert _series(version, 2) == _series(combo.cuda.value, 2), (platform, version)
    for platform, _pin, version in _pins(combo, {"cudnn"}):
        assert _series(version, 1) == _series(combo.cudnn.value, 1), (platform, version)
        assert _series(version, 3) >= _series(combo.cudnn.value, 3), (platform, version)


def test_a_gpu_older_than_the_build_but_known_to_the_toolkit_is_too_old() -> None:
    """Compute capability 3.0 (GTX 680): CUDA 10.0 still compiles for sm_30, but TF 1.14's
    build starts at 3.5. The verdict and the reason both say why."""
    catalog = load_catalog()
    result = check(
        catalog,
        catalog.combo("tf114-cuda100"),
        GpuSpec(parse_capability("3.0")),
        "linux-64",
        None,
    )
    assert result.verdict == "gpu-too-old"
    reasons = " ".join(result.reasons)
    assert "older than the oldest architecture tf114-cuda100 carries" in reasons
    assert "sm_35" in reasons


def test_an_uncovered_platform_says_why_in_the_catalogs_words() -> None:
    """A mutation run showed the reason of platform-unsupported was never read by a test."""
    catalog = load_catalog()
    combo = catalog.combo("tf215-cuda122")
    gap = combo.uncovered["win-64"]
    result = check(catalog, combo, GpuSpec(parse_capability("8.6")), "win-64", None)
    assert result.verdict == "platform-unsupported"
    (reason,) = result.reasons
    assert reason.startswith("tf215-cuda122 has no win-64 route: ")
    assert gap.reason in reason
    assert "(covered: linux-64)" in reason


def _fix(combo: str, gpu: str, driver: str | None) -> tuple[str, str, str | None, str | None]:
    from test_compat import compat_of

    result = compat_of(combo, gpu, "linux-64", driver)
    assert result.fix is not None
    return result.verdict, result.fix.text, result.fix.combo, result.fix.driver


def test_the_fix_names_what_to_do() -> None:
    """Mutation survivors: the fix texts and the 'or keep the driver' alternative were never
    read by a test, only the verdicts."""
    assert _fix("tf114-cuda100", "RTX 3080", None) == (
        "gpu-too-new",
        "use tf210-cuda112 (TensorFlow 2.10.0, CUDA 11.2), which runs there with native kernels",
        "tf210-cuda112",
        None,
    )
    verdict, text, combo, driver = _fix("tf210-cuda112", "GTX 1080", "440.33")
    assert (verdict, driver, combo) == ("driver-too-old", "450.80.02", "tf24-cuda101")
    assert text == (
        "install NVIDIA driver 450.80.02 or newer (linux), or keep driver 440.33 and use "
        "tf24-cuda101"
    )


def test_driver_versions_compare_part_by_part() -> None:
    from envfactory.diagnose.compat import parse_driver

    assert parse_driver("580.159.04").parts == (580, 159, 4)
    assert parse_driver("460.82") < parse_driver("460.106.00") < parse_driver("461")
