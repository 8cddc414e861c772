"""The catalog: every fact sourced, every tested TF GPU row covered, only build strings seen in
real data marked confirmed, and a loader that rejects malformed data with file and line."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from envfactory.catalog.loader import DATA_FILES, load_catalog, load_catalog_from
from envfactory.catalog.model import PLATFORMS, VARIANT_PACKAGES, Catalog, CondaPin, PipPin
from envfactory.errors import CatalogError, UserInputError

DATA = Path(__file__).parent / "data"
PACKAGE_DATA = Path(__file__).parent.parent / "envfactory" / "data"
SEED_GUIDE_FAKE_BUILD = "cuda100py37h7b36e6b_0"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def research() -> dict[str, object]:
    data = YAML(typ="safe").load((DATA / "research" / "compat-facts.yaml").read_text())
    assert isinstance(data, dict)
    return data


def all_pins(catalog: Catalog) -> Iterator[tuple[str, str, CondaPin | PipPin]]:
    for combo in catalog:
        for platform, route in combo.platforms.items():
            for pin in route.conda:
                yield combo.name, platform, pin
            for pins in route.conda_by_python.values():
                for pin in pins:
                    yield combo.name, platform, pin
            for pip in route.pip:
                yield combo.name, platform, pip


def test_at_least_30_combos_from_tf113_to_tf221(catalog: Catalog) -> None:
    versions = sorted(c.tf_series for c in catalog)
    assert len(catalog.combos) >= 30
    assert versions[0] == (1, 13)
    assert versions[-1] == (2, 21)


def test_every_fact_has_a_known_source(catalog: Catalog) -> None:
    cited: list[tuple[str, tuple[str, ...]]] = []
    for combo in catalog:
        for fact in (combo.tensorflow, combo.cuda, combo.cudnn):
            cited.append((combo.name, fact.sources))
        for route in combo.platforms.values():
            cited.append((combo.name, route.route.sources))
            cited.append((combo.name, route.min_driver.sources))
            cited.append((combo.name, route.targets.sources))
        for gap in combo.uncovered.values():
            cited.append((combo.name, gap.sources))
    for name, _platform, pin in all_pins(catalog):
        cited.append((name, pin.sources))
    for toolkit in catalog.toolkits.values():
        cited.append((toolkit.version, toolkit.sources))
    for name, sources in cited:
        assert sources, f"{name}: a fact without a source"
        unknown = [s for s in sources if s not in catalog.sources]
        assert not unknown, f"{name}: unknown sources {unknown}"


def _tested_rows() -> Iterator[tuple[str, str, str, str]]:
    """(platform, tf major.minor, cuda, cudnn) of every GPU row of TF's tested-build tables."""
    for row in research()["tf_builds"]:  # type: ignore[attr-defined]
        if row.get("cuda") is None or not re.match(r"^\d", str(row["tf_version"])):
            continue
        major, minor = (int(x) for x in str(row["tf_version"]).split(".")[:2])
        if (major, minor) < (1, 13):
            continue
        cuda = str(row["cuda"])
        cuda = cuda if "." in cuda else f"{cuda}.0"  # the Windows table writes CUDA 10 as "10"
        yield row["platform"], f"{major}{minor}", cuda, str(row["cudnn"])


def test_every_tested_gpu_row_has_a_combo_on_its_platform(catalog: Catalog) -> None:
    rows = list(_tested_rows())
    assert len([r for r in rows if r[0] == "linux-64"]) == 25
    assert len([r for r in rows if r[0] == "win-64"]) == 14
    for platform, series, cuda, cudnn in rows:
        name = f"tf{series}-cuda{cuda.replace('.', '')}"
        assert name in catalog.combos, f"no combo for the {platform} row TF {series} CUDA {cuda}"
        combo = catalog.combos[name]
        assert platform in combo.platforms, f"{name} does not cover {platform}"
        assert combo.cuda.value == cuda
        assert combo.cudnn.value == cudnn


def test_channel_deviations_have_combos_of_their_own(catalog: Catalog) -> None:
    # Anaconda defaults: TF 1.14 linux GPU builds are CUDA 10.1, TF 2.4.1 uses CUDA 10.1,
    # TF 2.5-2.12 use 11.3 (shared/research/compat-facts.md, table 9).
    assert catalog.combo("tf114-cuda101").deviation
    assert catalog.combo("tf24-cuda101").tensorflow.value == "2.4.1"
    for series in ("25", "26", "28", "29", "210", "211", "212"):
        combo = catalog.combo(f"tf{series}-cuda113")
        assert combo.cuda.value == "11.3" and combo.deviation


def _seen_builds() -> set[tuple[str, str, str]]:
    """(name, version, build) read verbatim in real conda output: the research notes' confirmed
    conda_builds rows and the real environment files copied into tests/data/real-envs and
    tests/data/audit-corpus."""
    seen: set[tuple[str, str, str]] = set()
    for row in research()["conda_builds"]:  # type: ignore[attr-defined]
        if row.get("confirmed") is True and re.fullmatch(r"[\w.-]+=[^=\s]+=[^=\s]+", row["spec"]):
            name, version, build = row["spec"].split("=")
            seen.add((name, version, build))
    real = DATA / "real-envs"
    exports = [*real.glob("*envexport*.yml"), *(DATA / "audit-corpus").glob("*.yml")]
    for path in exports:
        for match in re.finditer(r"^\s*- ([\w.-]+)=([^=\s]+)=(\S+)$", path.read_text(), re.M):
            seen.add((match[1], match[2], match[3]))
    for path in real.glob("*.conda-lock.yml"):
        for match in re.finditer(
            r"/([\w.-]+?)-([^-/\s]+)-([^-/\s]+)\.(?:tar\.bz2|conda)\b", path.read_text()
        ):
            seen.add((match[1], match[2], match[3]))
    return seen


def test_confirmed_build_strings_were_seen_in_real_data(catalog: Catalog) -> None:
    seen = _seen_builds()
    assert ("tensorflow-gpu", "1.13.1", "h0d30ee6_0") in seen  # the reader works
    unseen = []
    for name, platform, pin in all_pins(catalog):
        if not isinstance(pin, CondaPin) or not pin.build or not pin.confirmed:
            continue
        if (pin.name, pin.version, pin.build) not in seen:
            unseen.append(f"{name} {platform}: {pin.spec}")
    assert not unseen, "confirmed pins whose build string no real data shows:\n" + "\n".join(unseen)


def test_variant_pins_without_a_build_are_unconfirmed(catalog: Catalog) -> None:
    for name, platform, pin in all_pins(catalog):
        if isinstance(pin, CondaPin) and pin.name in VARIANT_PACKAGES and not pin.build:
            assert not pin.confirmed and pin.note, f"{name} {platform}: {pin.spec}"


def test_the_seed_guides_invented_build_appears_nowhere() -> None:
    locks = PACKAGE_DATA.parent.parent / "locks"
    files = [*PACKAGE_DATA.glob("*.yaml"), *locks.rglob("*.yml")]
    assert len(files) > 34, "the combos' rendered files are not where this test looks"
    for path in files:
        assert SEED_GUIDE_FAKE_BUILD not in path.read_text(), path


def test_tf114_cuda101_linux_uses_the_cuda101_build_never_with_cuda100(catalog: Catalog) -> None:
    route = catalog.combo("tf114-cuda101").route("linux-64")
    for py in route.pythons:
        specs = {p.name: p for p in route.conda_pins(py)}
        assert specs["tensorflow-base"].build.endswith("he45bfe2_0")  # type: ignore[union-attr]
        assert specs["cudatoolkit"].version.startswith("10.1")
    # and the CUDA 10.0 combo never carries that build
    cuda100 = catalog.combo("tf114-cuda100")
    for platform in PLATFORMS:
        for pin in cuda100.route(platform).conda_pins("3.7"):
            assert "he45bfe2" not in (pin.build or "")


def test_drivers_of_tf114_cuda100(catalog: Catalog) -> None:
    combo = catalog.combo("tf114-cuda100")
    assert combo.route("linux-64").min_driver.value == "410.48"
    assert combo.route("win-64").min_driver.value == "411.31"
    assert combo.route("linux-64").driver_threshold == "toolkit"


def test_windows_gpu_stops_at_210(catalog: Catalog) -> None:
    for combo in catalog:
        if combo.tf_series >= (2, 11):
            assert "win-64" not in combo.platforms, combo.name
            assert "win-64" in combo.uncovered, combo.name
    with pytest.raises(UserInputError) as info:
        catalog.combo("tf215-cuda122").route("win-64")
    assert "tf210-cuda112" in (info.value.hint or "")


def test_unknown_combo_suggests_the_nearest(catalog: Catalog) -> None:
    with pytest.raises(UserInputError) as info:
        catalog.combo("tf114-cuda10")
    assert "tf114-cuda100" in (info.value.hint or "")


# --- the loader rejects malformed data with file and line ---------------------------------


@pytest.fixture
def data_copy(tmp_path: Path) -> Path:
    for name in DATA_FILES:
        shutil.copy(PACKAGE_DATA / name, tmp_path / name)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> int:
    text = path.read_text()
    assert old in text
    line = text[: text.index(old)].count("\n") + 1
    path.write_text(text.replace(old, new, 1))
    return line


def test_loader_accepts_the_copy(data_copy: Path) -> None:
    assert load_catalog_from(data_copy).combos.keys() == load_catalog().combos.keys()


def test_unknown_key_is_rejected_with_file_and_line(data_copy: Path) -> None:
    line = _edit(
        data_copy / "combos.yaml",
        '    python_default: "3.7"\n',
        '    python_default: "3.7"\n    pyton_default: "3.6"\n',
    )
    with pytest.raises(CatalogError) as info:
        load_catalog_from(data_copy)
    assert f"combos.yaml:{line + 1}: unknown key 'pyton_default'" in info.value.message
    assert "python_default" in (info.value.hint or "")


def test_wrong_type_is_rejected_with_file_and_line(data_copy: Path) -> None:
    line = _edit(data_copy / "toolkits.yaml", "'410.48'", "410.48")
    with pytest.raises(CatalogError) as info:
        load_catalog_from(data_copy)
    assert f"toolkits.yaml:{line}:" in info.value.message
    assert "quoted string" in info.value.message


def test_a_fact_without_source_is_rejected(data_copy: Path) -> None:
    line = _edit(
        data_copy / "combos.yaml", 'sources: ["gh-16486979689", "gh-49209656005"]', "sources: []"
    )
    with pytest.raises(CatalogError) as info:
        load_catalog_from(data_copy)
    assert f"combos.yaml:{line}:" in info.value.message
    assert "no source" in info.value.message


def test_an_unknown_source_id_is_rejected(data_copy: Path) -> None:
    _edit(data_copy / "combos.yaml", '"gh-16486979689"', '"gh-16486979680"')
    with pytest.raises(CatalogError) as info:
        load_catalog_from(data_copy)
    assert "unknown source id 'gh-16486979680'" in info.value.message
    assert "gh-16486979689" in (info.value.hint or "")


def test_broken_yaml_is_reported_with_line(data_copy: Path) -> None:
    line = _edit(data_copy / "gpu-targets.yaml", "  tf-pip-2.3:\n", "  tf-pip-2.3: [\n")
    with pytest.raises(CatalogError) as info:
        load_catalog_from(data_copy)
    assert "gpu-targets.yaml:" in info.value.message
    reported = int(re.search(r"gpu-targets\.yaml:(\d+)", info.value.message)[1])  # type: ignore[index]
    assert abs(reported - line) <= 3


def test_a_confirmed_variant_pin_without_build_is_rejected(data_copy: Path) -> None:
    _edit(
        data_copy / "combos.yaml",
        '"defaults::tensorflow-gpu=1.13.1=h0d30ee6_0"',
        '"defaults::tensorflow-gpu=1.13.1"',
    )
    with pytest.raises(CatalogError) as info:
        load_catalog_from(data_copy)
    assert "has no build string" in info.value.message
