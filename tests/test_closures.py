"""Companion constraints and the closure checks, offline: where the constraints apply, how a
lock breaking one is refused, the CPU-variant check for every package, the no-solution hint that
names what the channels offer and whose spec excludes it, and the full regenerate line."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from factories import lock_request

import envfactory
from envfactory.catalog.loader import load_catalog, load_catalog_from
from envfactory.errors import CatalogError, ToolError
from envfactory.lockfile.models import LockedPackage
from envfactory.render.environment import environment_spec
from envfactory.solve.channels import ChannelMap
from envfactory.solve.checks import check_solution, refuse
from envfactory.solve.lock import LockRequest, lock_combo, solve_platform
from envfactory.solve.lockreview import check_lock
from envfactory.solve.rattler_adapter import matches

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")


def pip(name: str, version: str) -> LockedPackage:
    return LockedPackage(manager="pip", name=name, version=version, platform="linux-64", url="x")


def conda(name: str, version: str, build: str) -> LockedPackage:
    return LockedPackage(
        manager="conda", name=name, version=version, platform="linux-64", url="x", build=build
    )


def test_constraints_are_scoped_by_tf_line_and_route() -> None:
    catalog = load_catalog()
    tf114 = {c.requirement for c in catalog.combo("tf114-cuda100").constraints_for("linux-64")}
    assert {"protobuf<3.21", "h5py<3", "gast==0.2.2", "numpy<2"} <= tf114
    assert not catalog.combo("tf221-cuda125").constraints  # TF 2.21 caps what it needs itself
    tf210 = catalog.combo("tf210-cuda112")
    # conda-forge builds TF 2.10 from source against protobuf 4.21 (pangeo lock): exempt there,
    # the PyPI wheel on win-64 is not
    assert "protobuf<3.21" not in {c.requirement for c in tf210.constraints_for("linux-64")}
    assert "protobuf<3.21" in {c.requirement for c in tf210.constraints_for("win-64")}
    for combo in catalog:
        for c in combo.constraints:
            assert c.sources and all(s in catalog.sources for s in c.sources)


def test_a_lock_breaking_a_constraint_is_refused_with_package_version_bound_and_source() -> None:
    spec = environment_spec(load_catalog().combo("tf114-cuda100"), "linux-64")
    packages = [pip("tensorflow-gpu", "1.14.0"), pip("protobuf", "4.24.4"), pip("h5py", "2.10.0")]
    problems = check_solution(spec, packages, matches, with_pip=True)
    texts = [str(p) for p in problems]
    assert any(
        "protobuf: found 4.24.4 (pip)" in t and "protobuf<3.21" in t and "tf-issue-56266" in t
        for t in texts
    ), texts
    assert not any(t.startswith("h5py") for t in texts)
    error = refuse("tf114-cuda100", "linux-64", problems)
    assert isinstance(error, ToolError) and error.exit_code == 2


def test_cpu_variants_of_any_package_are_refused_in_a_gpu_combo() -> None:
    spec = environment_spec(load_catalog().combo("tf215-cuda122"), "linux-64")
    base = [pip("tensorflow", "2.15.0.post1")]
    cpu = [
        conda("jaxlib", "0.4.23", "cpu_py311h1234567_0"),
        conda("pytorch", "2.1.0", "cpu_mkl_py311h_0"),
    ]
    texts = [str(p) for p in check_solution(spec, base + cpu, matches, with_pip=True)]
    assert any(t.startswith("jaxlib: found 0.4.23 cpu_py311") for t in texts), texts
    assert any(t.startswith("pytorch: found 2.1.0 cpu_mkl") for t in texts), texts
    gpu = [conda("jaxlib", "0.4.23", "cuda120py311h1234567_200")]
    assert not check_solution(spec, base + gpu, matches, with_pip=True)
    # a pip jaxlib asked for without its CUDA plugin is the CPU build; one that TF brings in
    # as a dependency (TF 2.12 requires jax) is not what the user asked for, so it passes
    asked = check_solution(spec, [*base, pip("jaxlib", "0.4.23")], matches, True, ["jaxlib"])
    assert [p.package for p in asked] == ["jaxlib"]
    assert not check_solution(spec, [*base, pip("jaxlib", "0.4.23")], matches, True, [])
    plugin = [*base, pip("jaxlib", "0.4.23"), pip("jax-cuda12-plugin", "0.4.23")]
    assert not check_solution(spec, plugin, matches, True, ["jaxlib"])


def test_no_solution_hint_names_the_versions_offered_and_whose_spec_excludes_them(
    test_channels: dict[str, Path],
) -> None:
    # defaults pointed at the conda-forge test channel: it holds python 3.10, not 3.7
    combo = load_catalog().combo("tf114-cuda100")
    cmap = ChannelMap({"defaults": test_channels["conda-forge"].as_uri()})
    request = LockRequest.for_combo(combo, platforms=("linux-64",), channel_map=cmap)
    with pytest.raises(ToolError) as info:
        solve_platform(request, "linux-64")
    hint = info.value.hint or ""
    assert "the channels offer python 3.10.8" in hint, hint
    assert "'python=3.7' (the python of tf114-cuda100) excludes them" in hint
    assert "no channel offers" not in hint


def test_constraints_are_lock_inputs(test_channels: dict[str, Path], tmp_path: Path) -> None:
    request = lock_request(
        test_channels, "tf114-cuda100", platforms=("linux-64",), sources=("defaults", "conda-forge")
    )
    result = lock_combo(request, tmp_path)
    locked = {p.name: p.version for p in result.packages["linux-64"]}
    assert locked["protobuf"] == "3.19.6" and locked["h5py"] == "2.10.0"
    assert locked["gast"] == "0.2.2"
    assert "protobuf<3.21" in request.inputs["linux-64"].record()["constraints"]
    assert check_lock(request, tmp_path).fresh
    data = tmp_path / "catalog"
    shutil.copytree(Path(envfactory.__file__).parent / "data", data)
    constraints = data / "constraints.yaml"
    constraints.write_text(constraints.read_text().replace('spec: "<3.21"', 'spec: "<3.20"', 1))
    edited = load_catalog_from(data).combo("tf114-cuda100")
    stale = check_lock(dataclasses.replace(request, combo=edited), tmp_path)
    assert not stale.fresh
    assert any(
        "constraints changed" in r and "-protobuf<3.21 +protobuf<3.20" in r for r in stale.reasons
    )


def test_a_bad_constraint_specifier_names_file_and_line(tmp_path: Path) -> None:
    data = tmp_path / "catalog"
    shutil.copytree(Path(envfactory.__file__).parent / "data", data)
    constraints = data / "constraints.yaml"
    constraints.write_text(constraints.read_text().replace('spec: "<3.21"', 'spec: "three"', 1))
    with pytest.raises(CatalogError) as info:
        load_catalog_from(data)
    assert "constraints.yaml:" in info.value.message and "'three'" in info.value.message


def test_check_prints_a_regenerate_line_with_every_option(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    defaults, wheels = test_channels["defaults"], test_channels["wheels"]
    out = tmp_path / "elsewhere"
    args = ["lock", "tf114-cuda100", "-p", "linux-64", "--channel-map", f"defaults={defaults}",
            "--pip-index", str(wheels), "-o", str(out), "--check"]  # fmt: skip
    proc = subprocess.run([ENVFACTORY, *args], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr  # no lock yet: stale
    line = next(x for x in proc.stdout.splitlines() if x.startswith("regenerate: "))
    assert line.startswith("regenerate: envfactory lock tf114-cuda100 --platform linux-64")
    assert f"--channel-map defaults={defaults.as_uri()}" in line
    assert f"--pip-index {wheels}" in line
    assert f"-o {out}" in line


def test_conda_lock_is_imported_only_for_the_writer(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 11: solving and the pip resolution run before conda_lock is imported (0.5 s)."""
    script = f"""
import sys
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, lock_combo
from envfactory.catalog.loader import load_catalog
seen = []
def progress(message):
    seen.append((message.split(":", 1)[-1].strip()[:20], "conda_lock" in sys.modules))
cmap = ChannelMap({{"defaults": {test_channels["defaults"].as_uri()!r}}})
req = LockRequest.for_combo(load_catalog().combo("tf114-cuda100"), platforms=("linux-64",),
                            channel_map=cmap, pip_index={str(test_channels["wheels"])!r})
lock_combo(req, __import__("pathlib").Path({str(tmp_path)!r}), progress=progress)
print(seen)
print("conda_lock" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    seen, after = proc.stdout.strip().splitlines()
    assert "True" not in seen, seen  # not imported while solving and resolving
    assert after == "True"  # the writer did import it


def test_explain_names_the_constraint_that_fixes_the_protobuf_failure() -> None:
    from envfactory.diagnose.explain import explain

    log = (
        '  File "x.py", line 1, in <module>\n'
        "TypeError: Descriptors cannot not be created directly.\n"
        "If this call came from a _pb2.py file, your generated code is out of date\n"
    )
    (found,) = [p for p in explain(log).problems if p.id == "protobuf-too-new"]
    assert "protobuf<3.21" in found.fix
    # the constraint named is the catalog's, for the lines it names
    tf114 = load_catalog().combo("tf114-cuda100").constraints_for("linux-64")
    assert "protobuf<3.21" in {c.requirement for c in tf114}
