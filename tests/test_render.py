"""render: golden files for every combo x platform x python, the committed locks/ are fresh,
the design card's tf114-cuda100 pins, determinism, and template errors with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from goldenfiles import Goldens
from ruamel.yaml import YAML

from envfactory.activation.templating import render_template
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import PLATFORMS, Catalog
from envfactory.errors import CatalogError
from envfactory.fsio import RenderedFile
from envfactory.render.environment import render_combo, resolve_python

ROOT = Path(__file__).parent.parent
GOLDENS = Path(__file__).parent / "goldens" / "render"
LOCKS = ROOT / "locks"
CATALOG = load_catalog()

CASES = [
    (combo.name, platform, python)
    for combo in CATALOG
    for platform in PLATFORMS
    if platform in combo.platforms
    for python in combo.platforms[platform].pythons
]


def _default_python(name: str) -> str:
    combo = CATALOG.combo(name)
    return resolve_python(combo, [p for p in PLATFORMS if p in combo.platforms], None)


def _golden_path(name: str, platform: str, python: str, relpath: str) -> Path:
    """Each golden file lives in one place: a default-python rendering is the committed file
    under locks/ (what `envfactory render` writes); another python's is under tests/goldens/."""
    if python == _default_python(name):
        return LOCKS / name / relpath
    return GOLDENS / name / f"{platform}-py{python}.yml"


@pytest.mark.parametrize(("name", "platform", "python"), CASES)
def test_rendering_matches_golden(name: str, platform: str, python: str, goldens: Goldens) -> None:
    combo = CATALOG.combo(name)
    files = render_combo(combo, platforms=[platform], python=python)  # type: ignore[list-item]
    env = next(f for f in files if f.relpath.startswith("environment"))
    goldens.check(_golden_path(name, platform, python, env.relpath), env.content)


def test_goldens_cover_every_other_python_and_nothing_else() -> None:
    expected = {GOLDENS / n / f"{p}-py{py}.yml" for n, p, py in CASES if py != _default_python(n)}
    assert {p for p in GOLDENS.rglob("*") if p.is_file()} == expected


def test_a_differing_golden_fails_and_is_left_as_it_was(tmp_path: Path) -> None:
    golden = tmp_path / "env.yml"
    golden.write_bytes(b"old\r\n")
    with pytest.raises(pytest.fail.Exception, match="differs from the output"):
        Goldens(update=False).check(golden, "old\n")
    with pytest.raises(pytest.fail.Exception, match="is missing"):
        Goldens(update=False).check(tmp_path / "absent.yml", "new\n")
    assert golden.read_bytes() == b"old\r\n"
    assert not (tmp_path / "absent.yml").exists()


def test_update_goldens_rewrites_a_differing_file_and_still_fails(tmp_path: Path) -> None:
    """A run with --update-goldens that changed a golden file is never green."""
    golden, matching = tmp_path / "env.yml", tmp_path / "same.yml"
    golden.write_text("old\n")
    matching.write_text("same\n")
    updating = Goldens(update=True)
    updating.check(matching, "same\n")  # nothing to rewrite: passes
    with pytest.raises(pytest.fail.Exception, match=r"--update-goldens rewrote .*env\.yml"):
        updating.check(golden, "new\r\n")
    assert golden.read_bytes() == b"new\r\n"
    assert updating.rewritten == [golden]


def _full_render(name: str) -> list[RenderedFile]:
    return render_combo(CATALOG.combo(name))


@pytest.mark.parametrize("name", sorted(CATALOG.combos))
def test_committed_locks_are_fresh(name: str, goldens: Goldens) -> None:
    """Every rendered file of the combo's default python, byte for byte (the .bat scripts are
    CRLF on purpose and must stay so); `envfactory render NAME` rewrites them too."""
    for file in _full_render(name):
        goldens.check(LOCKS / name / file.relpath, file.content)


@pytest.mark.parametrize("name", sorted(CATALOG.combos))
def test_committed_locks_hold_no_leftover_rendered_file(name: str) -> None:
    rendered = {f.relpath for f in _full_render(name)}
    lock_outputs = {"conda-lock.yml"} | {f"conda-{p}.lock" for p in PLATFORMS}
    on_disk = {
        p.relative_to(LOCKS / name).as_posix() for p in (LOCKS / name).rglob("*") if p.is_file()
    }
    leftovers = on_disk - rendered - lock_outputs
    assert not leftovers, f"not rendered any more: {sorted(leftovers)}; delete them"


def test_locks_hold_no_rendered_file_of_an_unknown_combo() -> None:
    assert {p.name for p in LOCKS.iterdir() if p.is_dir()} <= set(CATALOG.combos)


def test_same_input_same_bytes() -> None:
    first = [(f.relpath, f.content) for f in _full_render("tf114-cuda100")]
    second = [(f.relpath, f.content) for f in _full_render("tf114-cuda100")]
    assert first == second


def _load_env(content: str) -> dict[str, object]:
    data = YAML(typ="safe").load(content)
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("platform", ["linux-64", "win-64"])
def test_tf114_cuda100_has_the_design_card_pins(platform: str) -> None:
    files = {f.relpath: f.content for f in _full_render("tf114-cuda100")}
    env = _load_env(files[f"environment.{platform}.yml"])
    deps = env["dependencies"]
    assert isinstance(deps, list)
    conda = [d for d in deps if isinstance(d, str)]
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    assert "python=3.7" in conda
    assert "numpy=1.16.4" in conda
    assert "scikit-image=0.16.2" in conda
    assert "cudatoolkit=10.0.130=0" in conda
    cudnn = [d for d in conda if d.startswith("cudnn=")]
    assert len(cudnn) == 1
    _, version, build = cudnn[0].split("=")
    assert version.startswith("7.") and build.startswith("cuda10.0")
    assert pip[0] == "tensorflow-gpu==1.14.0"  # the CUDA 10.0 wheel: the platform's route
    # then the companion constraints, which pip honours when conda env create runs it
    combo = CATALOG.combo("tf114-cuda100")
    assert pip[1:] == [c.requirement for c in combo.constraints_for(platform)]  # type: ignore[arg-type]
    # protobuf 3.20.x is the fix TF's own error names; the breakage starts at 4.21 (3.21 on conda)
    assert {"protobuf<3.21", "h5py<3", "gast==0.2.2"} <= set(pip)
    assert env["platforms"] == [platform]
    header = files[f"environment.{platform}.yml"].splitlines()[:3]
    assert header[0].startswith("# Generated by envfactory ")
    assert "# Regenerate: envfactory render tf114-cuda100" in header


def test_conda_route_pins_tensorflow_by_exact_build() -> None:
    files = {f.relpath: f.content for f in _full_render("tf114-cuda101")}
    env = _load_env(files["environment.yml"])
    assert "tensorflow-base=1.14.0=gpu_py37he45bfe2_0" in env["dependencies"]  # type: ignore[operator]
    assert "tensorflow-gpu=1.14.0=h0d30ee6_0" in env["dependencies"]  # type: ignore[operator]


def test_virtual_packages_come_from_the_combo() -> None:
    files = {f.relpath: f.content for f in _full_render("tf114-cuda100")}
    vp = _load_env(files["virtual-packages.yml"])
    subdirs = vp["subdirs"]
    assert isinstance(subdirs, dict)
    assert subdirs["linux-64"]["packages"]["__cuda"] == "10.0"
    assert subdirs["linux-64"]["packages"]["__glibc"] == "2.17"
    assert subdirs["win-64"]["packages"] == {"__cuda": "10.0", "__win": "0"}


def test_unconfirmed_pins_are_marked_in_the_file() -> None:
    files = {f.relpath: f.content for f in _full_render("tf114-cuda100")}
    linux = files["environment.linux-64.yml"]
    assert "cudnn=7.6.5=cuda10.0_0  # UNCONFIRMED" in linux
    win_pins = [
        line
        for line in files["environment.win-64.yml"].splitlines()
        if not any(k in line for k in ("declared by TF", "known breakage", "lock preference"))
    ]
    assert not [line for line in win_pins if "UNCONFIRMED" in line]


def test_mixed_channel_routes_qualify_their_pins(catalog: Catalog = CATALOG) -> None:
    files = {f.relpath: f.content for f in render_combo(catalog.combo("tf24-cuda110"))}
    assert "  - nvidia::cudatoolkit=11.0.221=h6bb024c_0\n" in files["environment.linux-64.yml"]


def test_template_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "broken.j2").write_text("line one\n{% for x in %}\n")
    with pytest.raises(CatalogError) as info:
        render_template("broken.j2", {}, tmp_path)
    assert "broken.j2:2" in info.value.message


def test_template_undefined_value_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "strict.j2").write_text("one\ntwo {{ missing }}\n")
    with pytest.raises(CatalogError) as info:
        render_template("strict.j2", {}, tmp_path)
    assert "strict.j2:2" in info.value.message
    assert "missing" in info.value.message


def test_anacondas_tf26_renders_the_keras_its_tf_keras_imports() -> None:
    """Anaconda's tensorflow 2.6 does not depend on keras, which its tf.keras is (TF 2.6.0's
    wheel declares keras~=2.6): every combo whose conda route takes TF 2.6 from defaults pins a
    keras 2.6 next to it."""
    checked = 0
    for combo in CATALOG.combos.values():
        if not combo.tensorflow.value.startswith("2.6."):
            continue
        for platform, route in combo.platforms.items():
            pins = route.conda_pins(combo.python_default)
            if not any(p.name == "tensorflow-base" for p in pins):
                continue
            checked += 1
            keras = [p for p in pins if p.name == "keras"]
            assert keras and keras[0].version.startswith("2.6"), (combo.name, platform)
    assert checked >= 1
