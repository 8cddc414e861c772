"""audit reads every real format and judges what it can: percent-encoded and token URLs,
requirements files in all their forms, exports in every encoding Windows writes; and the
coverage checks (TF distributions, keras, GPU intent, TF outside the catalog, scopes)."""

from __future__ import annotations

import codecs
from pathlib import Path

from envfactory.catalog.loader import load_catalog
from envfactory.diagnose.audit import AuditReport, audit_path, read_inventories

CORPUS = Path(__file__).parent / "data" / "audit-corpus"
REAL = Path(__file__).parent / "data" / "real-envs"


def _report(tmp_path: Path, name: str, text: str | bytes) -> AuditReport:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    [report] = audit_path(load_catalog(), path)
    return report


def _keys(report: AuditReport) -> set[str]:
    return {f.key for f in report.findings if f.severity == "problem"}


# ---- URLs


def test_explicit_urls_percent_encoded_and_with_a_token(tmp_path: Path) -> None:
    text = (
        "# platform: linux-64\n@EXPLICIT\n"
        "https://conda.anaconda.org/conda-forge/linux-64/x264-1%21164.3095-h166bdaf_2.tar.bz2"
        "#6c99772d483f566d59e25037fea2c4b1\n"
        "https://conda.anaconda.org/t/<TOKEN>/conda-forge/linux-64/"
        "tensorflow-base-2.10.0-cuda112py310he87a039_0.tar.bz2#0\n"
    )
    [inv] = read_inventories(_write(tmp_path, "conda-linux-64.lock", text))
    x264 = inv.conda("x264")
    assert x264 is not None and (x264.version, x264.build) == ("1!164.3095", "h166bdaf_2")
    base = inv.conda("tensorflow-base")
    assert base is not None and base.channel == "conda-forge"


def test_conda_lock_with_a_percent_encoded_file_name_is_read(tmp_path: Path) -> None:
    """conda-lock 2 writes the epoch's '!' as '%21' in URLs (x264-1%21164.3095-...); such a
    lock was refused (the file name was compared raw). The real pangeo lock, its packages cut
    to three, with that URL written as conda-lock 2 writes it."""
    from ruamel.yaml import YAML

    yaml = YAML()
    doc = yaml.load((REAL / PANGEO).read_text(encoding="utf-8"))
    keep = {"x264", "tensorflow-base", "python"}
    doc["package"] = [p for p in doc["package"] if p["name"] in keep]
    for p in doc["package"]:
        p["url"] = p["url"].replace("x264-1!164", "x264-1%21164")
    path = tmp_path / "conda-lock.yml"
    with path.open("w", encoding="utf-8") as f:
        yaml.dump(doc, f)
    assert "x264-1%21164.3095" in path.read_text(encoding="utf-8")
    [inv] = read_inventories(path)
    x264 = inv.conda("x264")
    assert x264 is not None and x264.version == "1!164.3095"
    assert {p.name for p in inv.packages} == keep


PANGEO = "tf2.10.0-cuda11.2-linux64-condalock--pangeo-data-pangeo-docker-images.conda-lock.yml"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---- requirements files


def test_requirements_in_every_form_are_read_and_what_cannot_be_judged_is_reported(
    tmp_path: Path,
) -> None:
    text = (
        "# the GPU stack\n"
        "-r base.txt\n"
        "--extra-index-url https://example.org/simple\n"
        "-e git+https://github.com/example/project.git#egg=project\n"
        "tensorflow-gpu==1.15.0 \\\n"
        "    --hash=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"
        "h5py>=3.1  # ranged\n"
        "keras\n"
        "numpy @ https://files.pythonhosted.org/packages/x/numpy-1.16.4-cp37-cp37m-manylinux1_x86_64.whl\n"
        "git+https://github.com/example/other.git\n"
        "protobuf==4.21.0\n"
    )
    report = _report(tmp_path, "requirements.txt", text)
    inv = report.inventory
    assert inv.kind == "requirements"
    tf = inv.pip("tensorflow-gpu")
    assert tf is not None and tf.version == "1.15.0"
    numpy = inv.pip("numpy")
    assert numpy is not None and numpy.version == "1.16.4"
    keras, h5py = inv.pip("keras"), inv.pip("h5py")
    assert keras is not None and keras.version == "" and h5py is not None and h5py.version == ""
    assert len(inv.skipped) == 2  # the -e line and the bare git URL
    warning = next(f for f in report.findings if f.id == "line-not-judged")
    assert warning.severity == "warning" and "2 line(s)" in warning.message
    assert "known-breakage:protobuf" in _keys(report)  # the rest is still judged


def test_a_short_requirements_file_with_an_unpinned_line_is_not_refused(tmp_path: Path) -> None:
    report = _report(tmp_path, "reqs.txt", "tensorflow-gpu==1.14.0\nkeras==2.2.4\nmatplotlib\n")
    assert report.inventory.kind == "requirements"
    assert report.verdict == "consistent"


# ---- encodings Windows writes


def test_an_export_reads_the_same_in_utf16_with_and_without_bom_with_bom_and_crlf(
    tmp_path: Path,
) -> None:
    """Windows PowerShell 5's '>' writes UTF-16 LE with a BOM; other tools write a UTF-8 BOM or
    CRLF. A real win-64 export (bdomae/MLmultipathBA) re-encoded each way reads the same."""
    original = (CORPUS / "bdomae--MLmultipathBA--tf-gpu.yml").read_text(encoding="utf-8")
    crlf = original.replace("\n", "\r\n")
    variants = {
        "utf16-bom.yml": codecs.BOM_UTF16_LE + crlf.encode("utf-16-le"),
        "utf16-nobom.yml": crlf.encode("utf-16-le"),
        "utf16-be.yml": codecs.BOM_UTF16_BE + crlf.encode("utf-16-be"),
        "utf8-bom.yml": codecs.BOM_UTF8 + crlf.encode("utf-8"),
    }
    [expected] = read_inventories(CORPUS / "bdomae--MLmultipathBA--tf-gpu.yml")
    assert expected.platform == "win-64" and len(expected.packages) > 100
    for name, data in variants.items():
        path = tmp_path / name
        path.write_bytes(data)
        [inv] = read_inventories(path)
        assert inv.packages == expected.packages, name
        assert (inv.kind, inv.platform, inv.name) == (expected.kind, "win-64", "tf-gpu"), name


def test_a_windows_code_page_path_does_not_refuse_the_file(tmp_path: Path) -> None:
    text = (
        "name: tf\ndependencies:\n  - tensorflow-gpu=2.1.0\nprefix: C:\\Users\\Jos\xe9\\envs\\tf\n"
    )
    report = _report(tmp_path, "env.yml", text.encode("cp1252"))
    assert report.tensorflow == "2.1.0" and report.inventory.platform == "win-64"


# ---- coverage


def test_standalone_keras_against_every_tf_line(tmp_path: Path) -> None:
    # keras 2.11 (tf.keras of 2.11) next to TF 2.2, which does not declare keras at all
    old = _report(tmp_path, "a.txt", "tensorflow-gpu==2.2.0\nkeras==2.11.0\n")
    assert "keras-skew:keras" in _keys(old)
    assert "declared" in old.findings[0].message and old.findings[0].source
    # multi-backend keras with TF 1.x is fine
    assert not _keys(_report(tmp_path, "b.txt", "tensorflow-gpu==1.14.0\nkeras==2.2.4\n"))
    # keras 2 under TF 2.16+ (which needs keras 3)
    assert "declared-requirement:keras" in _keys(
        _report(tmp_path, "c.txt", "tensorflow==2.16.1\nkeras==2.15.0\n")
    )


def test_keras_missing_next_to_anacondas_tf26(tmp_path: Path) -> None:
    lines = [
        "https://repo.anaconda.com/pkgs/main/win-64/tensorflow-2.6.0-gpu_py39he88c5ba_0.conda",
        "https://repo.anaconda.com/pkgs/main/win-64/tensorflow-base-2.6.0-gpu_py39hb3da07e_0.conda",
        "https://repo.anaconda.com/pkgs/main/win-64/cudatoolkit-11.3.1-h59b6b97_2.conda",
        "https://repo.anaconda.com/pkgs/main/win-64/python-3.9.12-h6244533_0.conda",
    ]
    text = "# platform: win-64\n@EXPLICIT\n" + "\n".join(lines) + "\n"
    assert "keras-missing:keras" in _keys(_report(tmp_path, "a.txt", text))
    keras = "https://repo.anaconda.com/pkgs/main/noarch/keras-2.6.0-pyhd3eb1b0_0.conda\n"
    assert "keras-missing:keras" not in _keys(_report(tmp_path, "b.txt", text + keras))


def test_two_tf_distributions_in_one_site_packages(tmp_path: Path) -> None:
    both = _report(tmp_path, "a.txt", "tensorflow-cpu==2.4.0\ntensorflow-gpu==2.4.0\n")
    assert "two-tf-distributions:tensorflow-gpu" in _keys(both)
    # tensorflow pulls tensorflow-intel of its own version on Windows: one TensorFlow
    intel = _report(tmp_path, "b.txt", "tensorflow==2.10.1\ntensorflow-intel==2.10.1\n")
    assert not any(f.id == "two-tf-distributions" for f in intel.findings)


def test_gpu_intent_with_a_cpu_only_build(tmp_path: Path) -> None:
    # TF >= 2.11 on native Windows has no GPU build, even next to cudatoolkit
    win = (
        "name: tf-gpu\ndependencies:\n  - python=3.10.9=h966fe2a_2\n  - vc=14.2=h21ff451_1\n"
        "  - cudatoolkit=11.2.2=h933977f_10\n  - pip:\n    - tensorflow==2.12.0\n"
    )
    assert "tf-cpu-build-gpu-intent" in _keys(_report(tmp_path, "win.yml", win))
    linux = win.replace("  - vc=14.2=h21ff451_1\n", "  - _libgcc_mutex=0.1=main\n")
    assert "tf-cpu-build-gpu-intent" not in _keys(_report(tmp_path, "linux.yml", linux))
    # an environment named for the GPU that holds the CPU wheel, no CUDA package in it
    named = "name: tensorflow-gpu\ndependencies:\n  - pip:\n    - tensorflow-cpu==2.4.0\n"
    assert "tf-cpu-build-gpu-intent" in _keys(_report(tmp_path, "named.yml", named))
    # before 1.15 the pip 'tensorflow' wheel is CPU-only
    old = "name: gpu\ndependencies:\n  - pip:\n    - tensorflow==1.14.0\n"
    assert "tf-cpu-build-gpu-intent" in _keys(_report(tmp_path, "old.yml", old))


def test_tf_outside_the_catalog_is_checked_against_the_tested_builds_or_unknown(
    tmp_path: Path,
) -> None:
    # TF 1.9 (tested with CUDA 9) next to CUDA 8: checked, a mismatch
    nine = (
        "name: x\ndependencies:\n  - python=3.6.5=hc3d631a_2\n  - _libgcc_mutex=0.1=main\n"
        "  - cudatoolkit=8.0=3\n  - pip:\n    - tensorflow-gpu==1.9.0\n"
    )
    report = _report(tmp_path, "nine.yml", nine)
    assert "cuda-mismatch" in _keys(report) and report.verdict == "inconsistent"
    # TF 0.12: no tested-build row (the tables start at 1.0); never 'consistent'
    old = _report(tmp_path, "old.txt", "tensorflow-gpu==0.12.1\nprotobuf==3.1.0\n")
    assert old.verdict == "unknown" and old.unchecked and "not checked" in old.unchecked
    # TF 1.0-1.4 rows of the tested-build tables (CUDA 8): TF 1.2 next to CUDA 9.0 is checked
    two = (
        "name: x\ndependencies:\n  - python=3.5.4=0\n  - cudatoolkit=9.0=h13b8566_0\n"
        "  - pip:\n    - tensorflow-gpu==1.2.0\n    - protobuf==3.3.0\n"
    )
    report = _report(tmp_path, "two.yml", two)
    assert report.verdict == "inconsistent" and "cuda-mismatch" in _keys(report)
    assert _report(tmp_path, "two8.yml", two.replace("9.0=h13b8566_0", "8.0=3")).verdict == (
        "consistent"
    )


def test_a_tf_pre_release_no_table_holds_is_unknown_never_consistent(tmp_path: Path) -> None:
    # held-out-3's keras-mmoe pins tensorflow==2.0.0-alpha0: neither the Requires-Dist table
    # nor the tested-build tables hold that release, so nothing about it can be checked
    alpha = _report(tmp_path, "alpha.txt", "numpy==1.16.3\ntensorflow==2.0.0-alpha0\n")
    assert alpha.verdict == "unknown" and alpha.unchecked and "pre-release" in alpha.unchecked
    final = _report(tmp_path, "final.txt", "numpy==1.16.3\ntensorflow==2.0.0\n")
    assert final.verdict == "consistent"


def test_a_bare_cuda_major_of_the_tables_means_its_x_0_libraries(tmp_path: Path) -> None:
    # TF 1.5-1.12 are tabled with CUDA "9": their binaries load libcudart.so.9.0
    text = (
        "name: x\ndependencies:\n  - python=3.6.10=h0371630_0\n  - cudatoolkit=9.0=h13b8566_0\n"
        "  - pip:\n    - tensorflow-gpu==1.12.0\n"
    )
    assert "cuda-mismatch" not in _keys(_report(tmp_path, "nine.yml", text))
    assert "cuda-mismatch" in _keys(
        _report(tmp_path, "ninetwo.yml", text.replace("9.0=h13b8566_0", "9.2=0"))
    )


def test_a_self_contained_conda_tensorflow_gpu_is_checked_against_the_tested_builds(
    tmp_path: Path,
) -> None:
    # a community channel's tensorflow-gpu (no tensorflow-base beside it) carries TF's own binary
    text = (
        "name: tf-gpu\nchannels:\n  - aaronzs\ndependencies:\n  - python=3.6.10=h9f7ef89_0\n"
        "  - cudatoolkit=10.2.89=h74a9793_0\n  - cudnn=7.6.5=cuda10.2_0\n"
        "  - tensorflow-gpu=1.9.0=py36_0\n"
    )
    report = _report(tmp_path, "aaronzs.yml", text)
    assert "cuda-mismatch" in _keys(report), report.findings
    fine = text.replace("10.2.89=h74a9793_0", "9.0=1").replace("cuda10.2_0", "cuda9.0_0")
    assert "cuda-mismatch" not in _keys(_report(tmp_path, "fine.yml", fine))
    # with Anaconda's tensorflow-base beside it, the base's build decides (not the table)
    base = text + "  - tensorflow-base=1.9.0=gpu_py36h6e53903_0\n"
    assert "cuda-mismatch" not in _keys(
        _report(
            tmp_path,
            "base.yml",
            base.replace("10.2.89=h74a9793_0", "9.0=1").replace("cuda10.2_0", "cuda9.0_0"),
        )
    )


def test_tflow_select_names_anacondas_variant(tmp_path: Path) -> None:
    # 'conda env export --no-builds': _tflow_select's version says the variant (2.3.0 = mkl)
    text = (
        "name: tf\ndependencies:\n  - _tflow_select=2.3.0\n  - python=3.10.13\n"
        "  - cuda-cudart=11.8.89\n  - cuda-runtime=11.8.0\n  - tensorflow=2.12.0\n"
        "  - tensorflow-base=2.12.0\n"
    )
    report = _report(tmp_path, "mkl.yml", text)
    assert "tf-cpu-build-with-cuda" in _keys(report) and report.verdict == "inconsistent"
    # 2.1.0 is the gpu variant
    gpu = _report(tmp_path, "gpu.yml", text.replace("_tflow_select=2.3.0", "_tflow_select=2.1.0"))
    assert "tf-cpu-build-with-cuda" not in _keys(gpu)
    # no CUDA package beside it: a CPU environment, nothing to say
    cpu = text.replace("  - cuda-cudart=11.8.89\n  - cuda-runtime=11.8.0\n", "")
    assert "tf-cpu-build-with-cuda" not in _keys(_report(tmp_path, "cpu.yml", cpu))


def test_non_tf_findings_stay_out_of_the_tf_verdict() -> None:
    [report] = audit_path(
        load_catalog(),
        REAL / "tf2.6.0-cuda11.1-pytorchcpu-linux64-explicit--hududed-generate-raman.txt",
    )
    pytorch = next(f for f in report.findings if f.id == "pytorch-cpu-build-with-cuda")
    assert pytorch.scope == "other" and pytorch.severity == "problem"
    assert report.verdict == "consistent"


def test_a_lock_preference_is_never_a_problem(tmp_path: Path) -> None:
    # wrapt 1.15 / numpy 1.24 / typing-extensions 4.7 under TF 2.11.1: lock's preferences only
    text = "tensorflow==2.11.1\nwrapt==1.15.0\nnumpy==1.24.4\ntyping-extensions==4.7.1\n"
    report = _report(tmp_path, "r.txt", text)
    assert not report.findings and report.verdict == "consistent"
    # while what TF 2.12.0 declares itself (wrapt<1.15) is
    assert "declared-requirement:wrapt" in _keys(
        _report(tmp_path, "s.txt", "tensorflow==2.12.0\nwrapt==1.15.0\n")
    )


def test_a_list_of_bare_names_is_read_not_refused(tmp_path: Path) -> None:
    """Found by the held-out run: tf_requirements.txt holding only names ('numpy',
    'tensorflow', ...) and one bare git+ URL was refused as a whole."""
    text = "tensorflow-gpu\ngit+https://github.com/tensorpack/tensorpack.git\nopencv-python\n"
    report = _report(tmp_path, "tf_requirements.txt", text)
    assert report.inventory.kind == "requirements" and report.verdict == "unknown"
    assert len(report.inventory.skipped) == 1


def test_a_ranged_pip_tensorflow_is_not_taken_for_an_old_cpu_wheel(tmp_path: Path) -> None:
    """Found by the held-out run: 'tensorflow >=2.8,<2.11' next to cudatoolkit was reported
    as the CPU-only pip wheel of TF < 2.1 (an unknown version compared as the oldest)."""
    text = (
        "name: orthoseg\nchannels:\n  - conda-forge\ndependencies:\n  - python =3.10\n"
        "  - cudatoolkit >=11.2,<11.3\n  - pip:\n    - tensorflow >=2.8,<2.11\n"
    )
    report = _report(tmp_path, "environment.yml", text)
    assert "tf-cpu-build-with-cuda" not in _keys(report)
    assert report.verdict == "unknown"


def test_multi_backend_keras_before_2_3_next_to_tensorflow_2(tmp_path: Path) -> None:
    # keras 2.2.5 and older support TensorFlow 1 only (keras-2-3-release)
    old = _report(tmp_path, "old.txt", "tensorflow==2.4.0\nKeras==2.0.4\n")
    assert "keras-skew:keras" in _keys(old)
    [finding] = [f for f in old.findings if f.id == "keras-skew"]
    assert finding.kind == "breakage" and finding.source == "keras-2-3-release"
    # the same keras with TF 1.15, and keras 2.3.1 with TF 2.2: nothing to say
    assert "keras-skew:keras" not in _keys(
        _report(tmp_path, "tf1.txt", "tensorflow==1.15.0\nkeras==2.2.5\n")
    )
    assert "keras-skew:keras" not in _keys(
        _report(tmp_path, "k23.txt", "tensorflow==2.2.0\nkeras==2.3.1\n")
    )
