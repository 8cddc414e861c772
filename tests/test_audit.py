"""audit: real environment files (tests/data/real-envs/, SOURCES.md there), every format it reads,
and the checks one by one on small files written here."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.catalog.loader import load_catalog
from envfactory.diagnose.audit import AuditReport, audit_path, read_inventories
from envfactory.errors import UserInputError

REAL = Path(__file__).parent / "data" / "real-envs"
ENVFACTORY = str(Path(sys.executable).parent / "envfactory")

# What SOURCES.md (shared/fixtures/real-envs) documents about each real file: the known
# inconsistencies, per platform; the others are consistent and must report nothing.
EXPECTED: dict[str, dict[str, set[str]]] = {
    "pytorch1.9.1-cuda11.2-linux64-osx64-win64-condalock--BioMedIA-deepali.conda-lock.yml": {
        "linux-64": set(),
        "osx-64": set(),
        "win-64": {"pytorch-cpu-build-with-cuda"},  # py3.9_cpu_0 next to cudatoolkit 11.2.2
    },
    "pytorch1.12.0-cuda11.6-linux64-win64-condalock--gnn-tracking-gnn_tracking.conda-lock.yml": {
        "linux-64": set(),
        "win-64": set(),
    },
    "pytorch2.1.2-cuda12.4-linux64-osx64-osxarm64-condalock--Clay-foundation-model.conda-lock.yml": {  # noqa: E501
        "linux-64": set(),
        "osx-64": set(),
        "osx-arm64": set(),
    },
    "tf1.11.0-gpu-cuda9.2-linux64-envexport--haiyang1986-TVAR.yml": {"linux-64": set()},
    "tf1.13.1-gpu-cuda10.0-win64-envexport--bengeof-QPoweredCompound2DeNovoDrugPropMax.yml": {
        "win-64": set()
    },
    "tf2.10.0-cuda11.2-linux64-condalock--pangeo-data-pangeo-docker-images.conda-lock.yml": {
        "linux-64": set()  # cudatoolkit 11.8 under a cuda112 build: allowed (>=11.2,<12)
    },
    "tf2.7.0-cuda10.2-linux64-condalock--microsoft-planetary-computer-containers.conda-lock.yml": {
        "linux-64": set()
    },
    "tf2.1.0-gpu-cuda10.1-linux64-explicit--pangeo-data-pangeo-docker-images.txt": {
        "linux-64": set()
    },
    "tf-gpu2.4.1-on-cpu-base-cuda11.4-linux64-explicit--pangeo-data-pangeo-docker-images.txt": {
        "linux-64": {"tf-cpu-build-with-cuda"}  # GPU metapackage over a CPU tensorflow-base
    },
    "tf2.4.1-gpu-cuda10.1-linux64-explicit--microsoft-planetary-computer-containers.txt": {
        "linux-64": {"tf-family-skew"}  # tensorflow-estimator 2.6.0 under TF 2.4.1
    },
    "pytorch1.7.0-cpu-with-cudatoolkit11.1-linux64-explicit--microsoft-planetary-computer-containers.txt": {  # noqa: E501
        "linux-64": {"pytorch-cpu-build-with-cuda"}
    },
    "tf2.11.1-pytorch2.0.0-cuda11.8-linux64-explicit--aws-sagemaker-distribution.txt": {
        "linux-64": set()  # consistent; wrapt 1.15.0 is what TF 2.11.1 declares allowed
    },
    "tf2.17.0-cuda12.5-linux64-explicit--aws-sagemaker-distribution.txt": {"linux-64": set()},
    "tf2.6.0-cuda11.1-pytorchcpu-linux64-explicit--hududed-generate-raman.txt": {
        # pytorch py3.7_cpu_0 + pytorch-mutex cpu (SOURCES.md); tensorboard 2.11.2 is inside the
        # tensorboard~=2.6 that TF 2.6.0 declares
        "linux-64": {"pytorch-cpu-build-with-cuda"}
    },
}


@functools.cache
def reports(name: str) -> tuple[AuditReport, ...]:
    """Each real file is read once per test run (conda-lock's reader takes seconds on big ones)."""
    return tuple(audit_path(load_catalog(), REAL / name))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_files_report_exactly_their_known_inconsistencies(name: str) -> None:
    reports = audit_path(load_catalog(), REAL / name)
    got = {
        str(r.inventory.platform): {f.id for f in r.findings if f.severity == "problem"}
        for r in reports
    }
    assert got == EXPECTED[name]
    for r in reports:
        if r.tensorflow:
            assert r.closest and r.manifest and f"combo: {r.closest}" in r.manifest


# The warnings on real files: channel mixes. Lock preferences (data/constraints.yaml, kind
# preference: numpy<1.24, wrapt<1.15, typing-extensions<4.6 for TF 2.11.1 in the SageMaker file,
# tensorboard<2.7 for TF 2.6.0 in generate-raman) are never reported. Checked exactly, so a bound
# that turns into a problem, or a new warning, shows up here.
WARNINGS: dict[tuple[str, str], set[str]] = {
    ("tf2.4.1-gpu-cuda10.1-linux64-explicit--microsoft-planetary-computer-containers.txt",
     "linux-64"): {
        "CUDA libraries come from 2 channels (conda-forge: cudatoolkit, cudnn; pkgs/main: cupti)",
    },
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_files_warn_exactly_where_expected(name: str) -> None:
    for r in reports(name):
        got = {f.message for f in r.findings if f.severity == "warning"}
        assert got == WARNINGS.get((name, str(r.inventory.platform)), set())


def test_every_real_file_is_covered() -> None:
    files = {p.name for p in REAL.iterdir() if p.suffix in (".yml", ".txt")}
    assert files == set(EXPECTED)


def test_the_known_inconsistencies_are_worded_with_their_packages() -> None:
    catalog = load_catalog()
    [skew] = audit_path(
        catalog,
        REAL / "tf2.4.1-gpu-cuda10.1-linux64-explicit--microsoft-planetary-computer-containers.txt",
    )
    found = next(f for f in skew.findings if f.id == "tf-family-skew")
    assert found.message.startswith("tensorflow-estimator 2.6.0 does not match TensorFlow 2.4.1")
    # every message names its kind and source
    assert "(declared: tensorflow 2.4.0 requires tensorflow-estimator<2.5.0" in found.message
    assert (found.kind, found.subject) == ("declared", "tensorflow-estimator")
    assert "PyPI Requires-Dist" in found.source
    assert skew.closest == "tf24-cuda101"
    [cpu] = audit_path(
        catalog,
        REAL
        / "tf-gpu2.4.1-on-cpu-base-cuda11.4-linux64-explicit--pangeo-data-pangeo-docker-images.txt",
    )
    found = next(f for f in cpu.findings if f.id == "tf-cpu-build-with-cuda")
    assert "tensorflow-base 2.4.1 build py39h23a8cbf_0 (conda-forge)" in found.message
    assert "tensorflow-gpu" in found.message and found.fix


def test_formats_are_recognized() -> None:
    kinds = {name: {inv.kind for inv in read_inventories(REAL / name)} for name in EXPECTED}
    assert kinds["tf1.11.0-gpu-cuda9.2-linux64-envexport--haiyang1986-TVAR.yml"] == {
        "conda env export"
    }
    assert kinds["tf2.1.0-gpu-cuda10.1-linux64-explicit--pangeo-data-pangeo-docker-images.txt"] == {
        "explicit"
    }
    assert kinds[
        "tf2.10.0-cuda11.2-linux64-condalock--pangeo-data-pangeo-docker-images.conda-lock.yml"
    ] == {"conda-lock"}
    tvar = read_inventories(REAL / "tf1.11.0-gpu-cuda9.2-linux64-envexport--haiyang1986-TVAR.yml")[
        0
    ]
    assert tvar.platform == "linux-64" and tvar.name == "tvar"
    numpy = tvar.pip("numpy")
    assert numpy is not None and numpy.version == "1.15.4"  # numpy only from pip there
    win = read_inventories(
        REAL
        / "tf1.13.1-gpu-cuda10.0-win64-envexport--bengeof-QPoweredCompound2DeNovoDrugPropMax.yml"
    )[0]
    assert win.platform == "win-64"
    base = win.conda("tensorflow-base")
    assert base is not None and (base.version, base.build) == ("1.13.1", "gpu_py37h871c8ca_0")


# ---- each check on a small file written here


def _audit(tmp_path: Path, name: str, text: str) -> set[str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    [report] = audit_path(load_catalog(), path)
    return {f.id for f in report.findings}


def test_python_outside_the_release_range_conda_list(tmp_path: Path) -> None:
    text = (
        "# packages in environment at /home/u/miniconda3/envs/tf114:\n"
        "#\n# Name                    Version                   Build  Channel\n"
        "python                    3.8.5                h7579374_1\n"
        "tensorflow-gpu            1.14.0                   pypi_0    pypi\n"
        "cudatoolkit               10.0.130                      0\n"
        "numpy                     1.16.4           py38h7e9f1db_0\n"
    )
    assert "python-outside-range" in _audit(tmp_path, "list.txt", text)


def test_conda_build_python_must_match(tmp_path: Path) -> None:
    text = (
        "name: x\ndependencies:\n  - python=3.8.5=h7579374_1\n"
        "  - tensorflow-base=1.14.0=gpu_py37he45bfe2_0\n  - tensorflow=1.14.0=gpu_py37h74c33d7_0\n"
        "  - cudatoolkit=10.1.168=0\n  - _libgcc_mutex=0.1=main\n"
    )
    assert "python-outside-range" in _audit(tmp_path, "env.yml", text)


def test_cuda_of_a_pip_tensorflow_and_of_cudnn(tmp_path: Path) -> None:
    text = (
        "name: x\ndependencies:\n  - python=3.7.9=h60c2a47_0\n  - cudatoolkit=10.1.243=h6bb024c_0\n"
        "  - cudnn=7.6.5=cuda10.0_0\n  - pip:\n    - tensorflow-gpu==1.14.0\n"
    )
    ids = _audit(tmp_path, "env.yml", text)
    assert "cuda-mismatch" in ids  # TF 1.14 wheels need CUDA 10.0; cudnn is for 10.0 too


def test_pip_tensorflow_over_conda_and_mixed_channels(tmp_path: Path) -> None:
    text = (
        "@EXPLICIT\n"
        "https://repo.anaconda.com/pkgs/main/linux-64/tensorflow-2.4.1-gpu_py38h8a7d6ce_0.conda#0\n"
        "https://repo.anaconda.com/pkgs/main/linux-64/tensorflow-base-2.4.1-gpu_py38h29c2da4_0.conda#0\n"
        "https://repo.anaconda.com/pkgs/main/linux-64/cudatoolkit-10.1.243-h6bb024c_0.conda#0\n"
        "https://conda.anaconda.org/conda-forge/linux-64/cudnn-7.6.5.32-hc0a50b0_1.tar.bz2#0\n"
        "https://conda.anaconda.org/conda-forge/linux-64/python-3.8.12-hb7a2778_2_cpython.tar.bz2#0\n"
    )
    ids = _audit(tmp_path, "explicit.txt", text)
    assert "cuda-mixed-channels" in ids
    freeze_and_conda = (
        "# packages in environment at /opt/env:\n#\n"
        "tensorflow                2.4.1           gpu_py38h8a7d6ce_0\n"
        "tensorflow                2.11.0                   pypi_0    pypi\n"
    )
    assert "pip-tf-over-conda" in _audit(tmp_path, "list2.txt", freeze_and_conda)


def test_conda_list_export_with_pip_packages(tmp_path: Path) -> None:
    text = (
        "# This file may be used to create an environment using:\n"
        "# $ conda create --name <env> --file <this file>\n# platform: win-64\n"
        "_tflow_select=2.1.0=gpu\ncudatoolkit=10.0.130=0\ncudnn=7.6.5=cuda10.0_0\n"
        "python=3.7.7=h81c818b_4\ntensorflow-gpu=2.1.0=pypi_0\ntensorflow-estimator=2.4.0=pypi_0\n"
    )
    path = tmp_path / "export.txt"
    path.write_text(text)
    [report] = audit_path(load_catalog(), path)
    assert (report.inventory.kind, report.inventory.platform) == ("conda list --export", "win-64")
    ids = {f.id for f in report.findings}
    # TF 2.1 wheels were built for CUDA 10.1; estimator 2.4 is not what TF 2.1.0 declares
    assert {"cuda-mismatch", "declared-requirement"} <= ids


def test_companion_constraints_of_the_catalog(tmp_path: Path) -> None:
    catalog = load_catalog()
    assert any(c.package == "gast" for c in catalog.constraints)
    text = "tensorflow-gpu==1.14.0\nprotobuf==4.21.0\ngast==0.3.3\nnumpy==1.16.4\nh5py==2.10.0\n"
    path = tmp_path / "freeze.txt"
    path.write_text(text)
    [report] = audit_path(catalog, path)
    outside = [f for f in report.findings if f.id == "known-breakage"]
    assert {f.message.split(" is ")[0] for f in outside} == {"protobuf 4.21.0", "gast 0.3.3"}
    assert all(f.severity == "problem" and f.cause for f in outside)
    assert all("(breakage; source: " in f.message and f.source for f in outside)
    # conda-forge builds TF against its own protobuf: the protobuf bound is exempt there
    conda_forge = (
        "@EXPLICIT\n"
        "https://conda.anaconda.org/conda-forge/linux-64/tensorflow-base-2.6.0-cuda112py39h1_0.tar.bz2\n"
        "https://conda.anaconda.org/conda-forge/linux-64/protobuf-4.21.12-py39h2_0.tar.bz2\n"
    )
    assert "known-breakage" not in _audit(tmp_path, "cf.txt", conda_forge)
    defaults = conda_forge.replace("conda.anaconda.org/conda-forge", "repo.anaconda.com/pkgs/main")
    assert "known-breakage" in _audit(tmp_path, "main.txt", defaults)
    # protobuf 3.20.x is the fix TF's error names, not a problem (tensorflow#56266)
    fixed = defaults.replace("protobuf-4.21.12", "protobuf-3.20.3")
    assert "known-breakage" not in _audit(tmp_path, "fixed.txt", fixed)


def test_pip_freeze_and_keras_out_of_step(tmp_path: Path) -> None:
    text = "tensorflow==2.12.0\nkeras==2.11.0\ntensorboard==2.12.3\nnumpy==1.23.5\n"
    path = tmp_path / "requirements.txt"
    path.write_text(text)
    [report] = audit_path(load_catalog(), path)
    assert report.inventory.kind == "pip freeze"
    assert [f.key for f in report.findings] == ["declared-requirement:keras"]
    assert "keras 2.11.0 is outside keras<2.13,>=2.12.0, which tensorflow 2.12.0 declares" in (
        report.findings[0].message
    )


def test_live_prefix(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    meta = prefix / "conda-meta"
    meta.mkdir(parents=True)
    for name, version, build in (
        ("tensorflow-base", "2.4.1", "mkl_py38h43e0292_0"),
        ("tensorflow", "2.4.1", "mkl_py38hb2083e0_0"),
        ("cudatoolkit", "10.1.243", "h6bb024c_0"),
        ("python", "3.8.5", "h7579374_1"),
    ):
        (meta / f"{name}-{version}-{build}.json").write_text(
            json.dumps({"name": name, "version": version, "build": build, "channel": "pkgs/main"})
        )
    [report] = audit_path(load_catalog(), prefix)
    assert report.inventory.kind == "prefix"
    assert "tf-cpu-build-with-cuda" in {f.id for f in report.findings}


def test_bad_input_is_an_error_with_a_hint(tmp_path: Path) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    with pytest.raises(UserInputError) as caught:
        read_inventories(junk)
    assert caught.value.hint
    binary = tmp_path / "bin.yml"
    binary.write_bytes(b"\xff\xfe\xff\xff\xd8\x00")
    with pytest.raises(UserInputError):
        read_inventories(binary)
    with pytest.raises(UserInputError, match="neither a conda environment"):
        read_inventories(tmp_path)


def test_cli_audit_json_exit_codes_and_manifest(tmp_path: Path) -> None:
    bad = (
        REAL
        / "tf-gpu2.4.1-on-cpu-base-cuda11.4-linux64-explicit--pangeo-data-pangeo-docker-images.txt"
    )
    done = subprocess.run(
        [ENVFACTORY, "audit", str(bad), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    [env] = json.loads(done.stdout)["environments"]
    assert env["problems"] >= 1 and env["closest_combo"] == "tf24-cuda101"
    assert env["manifest"].startswith("environments:\n")
    good = (
        REAL
        / "tf1.13.1-gpu-cuda10.0-win64-envexport--bengeof-QPoweredCompound2DeNovoDrugPropMax.yml"
    )
    text = subprocess.run(
        [ENVFACTORY, "audit", str(good)], capture_output=True, text=True, timeout=120, check=False
    )
    assert text.returncode == 0 and "TensorFlow verdict: consistent" in text.stdout
    assert "combo: tf113-cuda100" in text.stdout and "platforms: [win-64]" in text.stdout
    missing = subprocess.run(
        [ENVFACTORY, "audit", str(tmp_path / "nope.yml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (
        missing.returncode == 1 and "error:" in missing.stderr and "Traceback" not in missing.stderr
    )
