"""Project manifests: the validating loader (errors with file and line, additions that clash with
the combo), and the example project end to end through the console script: lock every
environment, check, create both offline, activate and deactivate both in one bash session, and
``lock --check`` catching an edit of envfactory.yaml."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_activation_shells import link_python

from envfactory.project.manifest import ProjectError, load_project

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tf1-tf2"


def run(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVFACTORY, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def manifest(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "envfactory.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str) -> ProjectError:
    with pytest.raises(ProjectError) as info:
        load_project(manifest(tmp_path, text))
    return info.value


# ------------------------------------------------------------------------------------------
# The loader.


def test_example_manifest_loads() -> None:
    project = load_project(EXAMPLE / "envfactory.yaml")
    legacy, modern = project.environment("legacy"), project.environment("modern")
    assert (legacy.combo.name, legacy.python, legacy.platforms) == (
        "tf114-cuda100",
        "3.7",
        ("linux-64", "win-64"),
    )
    assert legacy.conda == ("opencv=3.4.2", "pandas")
    assert dict(legacy.variables) == {"KERAS_BACKEND": "tensorflow"}
    assert (modern.combo.name, modern.platforms, modern.conda) == (
        "tf210-cuda112",
        ("linux-64",),
        ("jupyterlab",),
    )
    assert project.lock_dir("legacy") == EXAMPLE / "locks" / "legacy"


@pytest.mark.parametrize(
    ("add", "line", "names"),
    [
        # the design card's pin: numpy 1.16.4 keeps TF 1.14 quiet
        ("[opencv=3.4.2, numpy=1.17]", 4, ["'numpy=1.17'", "numpy=1.16.4", "linux-64"]),
        ("[numpy]", 4, ["'numpy'", "numpy=1.16.4"]),
        ("[cudatoolkit=10.1]", 4, ["'cudatoolkit=10.1'", "cudatoolkit=10.0.130=0"]),
        # tf114-cuda100 pins no conda tensorflow (its TensorFlow is the pip wheel): still a clash
        ("[tensorflow=1.14]", 4, ["'tensorflow=1.14'", "variant", "tensorflow-gpu==1.14.0"]),
        ("[python=3.8]", 4, ["'python=3.8'", "python 3.7"]),
    ],
)
def test_an_addition_never_overrides_a_combo_pin(
    tmp_path: Path, add: str, line: int, names: list[str]
) -> None:
    error = load_error(
        tmp_path, f"environments:\n  legacy:\n    combo: tf114-cuda100\n    add: {add}\n"
    )
    assert error.message.startswith(f"{tmp_path / 'envfactory.yaml'}:{line}: ")
    for name in names:
        assert name in error.message, error.message
    assert error.hint and "tf114-cuda100" in error.hint


def test_a_multiline_add_list_names_the_clashing_line(tmp_path: Path) -> None:
    text = (
        "environments:\n"
        "  legacy:\n"
        "    combo: tf114-cuda100\n"
        "    add:\n"
        "      - opencv=3.4.2\n"
        "      - pandas\n"
        "      - scikit-image=0.17.2\n"
    )
    error = load_error(tmp_path, text)
    assert ":7: " in error.message and "scikit-image=0.16.2" in error.message


@pytest.mark.parametrize(
    ("pip", "expected"),
    [
        ("tensorflow-gpu==1.15.0", "tensorflow-gpu==1.14.0"),
        ("tensorflow==2.0.0", "TensorFlow 1.14.0"),
        ("numpy==1.17.0", "numpy=1.16.4"),
    ],
)
def test_a_pip_addition_never_overrides_the_combo(tmp_path: Path, pip: str, expected: str) -> None:
    error = load_error(
        tmp_path, f"environments:\n  legacy:\n    combo: tf114-cuda100\n    pip: ['{pip}']\n"
    )
    assert ":4: " in error.message and expected in error.message, error.message


@pytest.mark.parametrize(
    ("body", "line", "fragment", "hint"),
    [
        ("    combo: tf114-cuda10\n", 3, "unknown combo 'tf114-cuda10'", "tf114-cuda100"),
        ("    combo: tf114-cuda100\n    ad: [pandas]\n", 4, "unknown key 'ad'", "add"),
        ("    combo: tf114-cuda100\n    python: '3.8'\n", 4, "python 3.8", "3.7"),
        ("    combo: tf215-cuda122\n    platforms: [win-64]\n", 4, "does not cover win-64", None),
        ("    combo: tf114-cuda100\n    platforms: [linux64]\n", 4, "unknown platform", None),
        ("    combo: tf114-cuda100\n    variables: {PATH: /x}\n", 4, "PATH is set by", None),
        ("    combo: tf114-cuda100\n    add: ['defaults::opencv', 'nvidia::cudnn']\n", 4,
         "channel 'nvidia'", "channels"),
        ("    python: '3.7'\n", 3, "lacks required key(s): combo", None),
    ],
)  # fmt: skip
def test_errors_name_file_and_line(
    tmp_path: Path, body: str, line: int, fragment: str, hint: str | None
) -> None:
    error = load_error(tmp_path, "environments:\n  legacy:\n" + body)
    assert error.message.startswith(f"{tmp_path / 'envfactory.yaml'}:{line}: "), error.message
    assert fragment in error.message, error.message
    if hint:
        assert error.hint and hint in error.hint, error.hint


def test_not_yaml_and_empty(tmp_path: Path) -> None:
    assert ":2: not valid YAML" in load_error(tmp_path, "environments:\n  legacy: a: b\n").message
    assert "empty" in load_error(tmp_path, "").message


# ------------------------------------------------------------------------------------------
# The CLI: which target, no project.


def test_lock_without_a_project_is_an_error_with_a_hint(tmp_path: Path) -> None:
    proc = run("lock", cwd=tmp_path)
    assert proc.returncode == 1
    assert "no envfactory.yaml in" in proc.stderr
    assert "hint:" in proc.stderr and "--project" in proc.stderr


def test_a_project_environment_wins_over_a_combo_of_the_same_name(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    manifest(
        tmp_path,
        "environments:\n  tf114-cuda100:\n    combo: tf114-cuda100\n"
        "    platforms: [linux-64]\n    add: [pandas]\n",
    )
    flags = ["--channel-map", f"defaults={test_channels['defaults']}",
             "--pip-index", str(test_channels["wheels"])]  # fmt: skip
    proc = run("lock", "tf114-cuda100", *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "tf114-cuda100 (project environment, combo tf114-cuda100)" in proc.stderr
    assert "pandas" in (tmp_path / "locks/tf114-cuda100/environment.linux-64.yml").read_text()
    # a combo the project does not define is still a combo
    other = run("lock", "tf114-cuda101", *flags, cwd=tmp_path)
    assert other.returncode == 0, other.stderr
    assert "tf114-cuda101 (combo)" in other.stderr
    # a project environment takes platforms from the manifest, not from the command line
    refused = run("lock", "tf114-cuda100", "-p", "linux-64", cwd=tmp_path)
    assert refused.returncode == 1 and "platforms:" in refused.stderr


# ------------------------------------------------------------------------------------------
# The example project, end to end.


@pytest.fixture(scope="module")
def example(test_channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example project copied into a temporary directory and locked (`envfactory lock`)."""
    project = tmp_path_factory.mktemp("project") / "tf1-tf2"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("locks", "envs"))
    proc = run("lock", *lock_flags(test_channels), cwd=project)
    assert proc.returncode == 0, proc.stderr
    return project


def lock_flags(channels: dict[str, Path]) -> list[str]:
    return ["--channel-map", f"defaults={channels['defaults']}",
            "--channel-map", f"conda-forge={channels['conda-forge']}",
            "--pip-index", str(channels["wheels"])]  # fmt: skip


def test_example_lock_writes_both_environments(example: Path) -> None:
    legacy = (example / "locks/legacy/conda-lock.yml").read_text()
    assert "envfactory.regenerate: envfactory lock legacy" in legacy
    assert "envfactory.environment: legacy" in legacy
    assert "envfactory.combo: tf114-cuda100" in legacy
    env_file = (example / "locks/legacy/environment.linux-64.yml").read_text()
    assert "Regenerate: envfactory lock legacy" in env_file
    assert "  - opencv=3.4.2  # added by envfactory.yaml\n" in env_file
    assert "  - numpy=1.16.4\n" in env_file
    assert {
        "conda-linux-64.lock",
        "conda-lock.yml",
        "environment.linux-64.yml",
        "virtual-packages.yml",
    } <= {p.name for p in (example / "locks/modern").iterdir()}
    assert not (example / "locks/modern/conda-win-64.lock").exists()
    explicit = (example / "locks/legacy/conda-linux-64.lock").read_text()
    # the addition is solved under the combo's numpy: pandas 0.24.2, not the numpy-1.17 decoy
    assert "/pandas-0.24.2-py37he6710b0_0.tar.bz2#" in explicit
    assert "numpy-1.16.4-" in explicit and "numpy-1.17" not in explicit
    assert "/opencv-3.4.2-py37h6fd60c2_1.tar.bz2#" in explicit
    modern = (example / "locks/modern/conda-linux-64.lock").read_text()
    assert "/jupyterlab-3.5.1-pyhd8ed1ab_0.tar.bz2#" in modern
    assert "/tensorflow-base-2.10.0-cuda112py310hf679b68_0.tar.bz2#" in modern


def test_example_lock_is_reproducible(example: Path, test_channels: dict[str, Path]) -> None:
    before = {p: p.read_bytes() for p in sorted((example / "locks").rglob("*")) if p.is_file()}
    proc = run("lock", *lock_flags(test_channels), cwd=example)
    assert proc.returncode == 0, proc.stderr
    after = {p: p.read_bytes() for p in sorted((example / "locks").rglob("*")) if p.is_file()}
    assert after == before


def test_example_check_catches_an_edit_of_the_manifest(
    example: Path, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    fresh = run("lock", "--check", *lock_flags(test_channels), cwd=example)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert fresh.stdout.count("is up to date") == 2

    edited = tmp_path / "edited"
    shutil.copytree(example, edited, ignore=shutil.ignore_patterns("envs"))
    text = (edited / "envfactory.yaml").read_text()
    (edited / "envfactory.yaml").write_text(
        text.replace("add: [jupyterlab]", "add: [jupyterlab, pandas]")
    )
    stale = run("lock", "--check", *lock_flags(test_channels), cwd=edited)
    assert stale.returncode == 1
    assert "legacy/conda-lock.yml is up to date" in stale.stdout
    assert "modern/conda-lock.yml is stale" in stale.stdout
    assert "linux-64: conda changed: +pandas" in stale.stdout
    assert "regenerate: envfactory lock modern" in stale.stdout

    # a variable is an input too
    (edited / "envfactory.yaml").write_text(text.replace("tensorflow\n", "theano\n"))
    as_json = run("lock", "--check", "--json", *lock_flags(test_channels), cwd=edited)
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["fresh"] is False
    assert report["environments"]["modern"]["fresh"] is True
    assert any("variables changed" in r for r in report["environments"]["legacy"]["reasons"])


ACTIVATION_SESSION = r"""
set -u
export PATH="/usr/local/cuda-10.0/bin:/usr/bin:/bin"
export LD_LIBRARY_PATH="/usr/local/cuda-10.0/lib64"
export CUDA_PATH="/usr/local/cuda-10.0"
export CONDA_SHLVL=0
unset TF_CPP_MIN_LOG_LEVEL CONDA_PREFIX
snapshot() { env | LC_ALL=C sort | grep -v -e '^_=' -e '^SHLVL=' -e '^OLDPWD=' ; }
report() { printf '%s PATH=%s\n%s LD_LIBRARY_PATH=%s\n%s TF=%s\n%s CUDA_PATH=%s\n' \
    "$1" "$PATH" "$1" "${LD_LIBRARY_PATH-<unset>}" "$1" "${TF_CPP_MIN_LOG_LEVEL-<unset>}" \
    "$1" "${CUDA_PATH-<unset>}"; }
# What 'conda activate PREFIX' and 'conda deactivate' do around the scripts (conda's order).
activate() {
    export CONDA_PREFIX="$1" CONDA_SHLVL=1 PATH="$1/bin:$PATH"
    found=0
    for f in "$1"/etc/conda/activate.d/*.sh; do [ -e "$f" ] && found=1 && . "$f"; done
    [ "$found" = 1 ] || { echo "NO ACTIVATION SCRIPTS in $1" >&2; exit 7; }
}
deactivate() {
    PATH="${PATH#"$CONDA_PREFIX/bin:"}"
    for f in $(ls -r "$CONDA_PREFIX"/etc/conda/deactivate.d/*.sh); do . "$f"; done
    unset CONDA_PREFIX; export CONDA_SHLVL=0
}
start=$(snapshot)
activate "$LEGACY"; report legacy; deactivate
activate "$MODERN"; report modern; deactivate
end=$(snapshot)
if [ "$start" = "$end" ]; then echo "RESTORED"; else diff <(echo "$start") <(echo "$end"); fi
"""


@pytest.mark.slow
def test_example_create_both_offline_then_activate_and_deactivate_in_one_session(
    example: Path,
) -> None:
    for name in ("legacy", "modern"):
        created = run("create", name, cwd=example)
        assert created.returncode == 0, created.stderr
        assert f"{name}: project environment of" in created.stderr
        prefix = example / "envs" / name
        assert f"created {prefix} (linux-64)" in created.stdout
        verified = run("verify", str(prefix), cwd=example)
        assert verified.returncode == 0 and "is identical" in verified.stdout, verified.stdout
    legacy, modern = example / "envs/legacy", example / "envs/modern"
    for prefix in (legacy, modern):
        # the activation core runs with the environment's own Python; the test channels'
        # python packages are stubs, so the host's stands in (as in test_activation_shells)
        link_python(prefix)
    state = json.loads((legacy / "conda-meta/state").read_text())
    assert state == {"env_vars": {"KERAS_BACKEND": "tensorflow"}}
    marker = json.loads((legacy / "conda-meta/envfactory.json").read_text())
    assert (marker["combo"], marker["environment"]) == ("tf114-cuda100", "legacy")

    proc = subprocess.run(
        ["bash", "-c", ACTIVATION_SESSION],
        capture_output=True,
        text=True,
        timeout=60,
        env={"LEGACY": str(legacy), "MODERN": str(modern), "HOME": str(example)},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    values = {tuple(line.split("=", 1)) for line in lines if "=" in line}
    # legacy (tf114-cuda100: the pip wheel on conda CUDA 10.0): its lib first, no foreign CUDA
    assert ("legacy PATH", f"{legacy}/bin:/usr/bin:/bin") in values, lines
    assert ("legacy LD_LIBRARY_PATH", f"{legacy}/lib") in values, lines
    assert ("legacy TF", "2") in values and ("legacy CUDA_PATH", "<unset>") in values, lines
    # modern (conda-built TF 2.10 finds CUDA through its RPATH): nothing prepended, foreign gone
    assert ("modern PATH", f"{modern}/bin:/usr/bin:/bin") in values, lines
    assert ("modern CUDA_PATH", "<unset>") in values, lines
    assert ("modern TF", "2") in values, lines
    assert ("modern LD_LIBRARY_PATH", "<unset>") in values, lines
    assert lines[-1] == "RESTORED", proc.stdout


def test_pre_commit_hook_runs_the_freshness_check(
    example: Path, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    """The hook as pre-commit runs it: ``entry`` + the user's ``args``, no file names; and its
    ``files`` pattern (pre-commit uses re.search) selects the manifest and the locks."""
    import re

    from ruamel.yaml import YAML

    hooks = YAML(typ="safe").load((EXAMPLE.parent.parent / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["id"] == "envfactory-lock-check" and hook["pass_filenames"] is False
    files = re.compile(hook["files"])
    for path in ("envfactory.yaml", "envfactory.toml", "locks/legacy/conda-lock.yml",
                 "sub/project/envfactory.yaml"):  # fmt: skip
        assert files.search(path), path
    for path in ("README.md", "src/locks.py", "my-envfactory.yaml.bak"):
        assert not files.search(path), path

    program, *entry_args = hook["entry"].split()
    assert program == "envfactory"
    command = [ENVFACTORY, *entry_args, *lock_flags(test_channels)]
    fresh = subprocess.run(command, cwd=example, capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    edited = tmp_path / "edited"
    shutil.copytree(example, edited, ignore=shutil.ignore_patterns("envs"))
    manifest_path = edited / "envfactory.yaml"
    manifest_path.write_text(manifest_path.read_text().replace("opencv=3.4.2, ", ""))
    stale = subprocess.run(command, cwd=edited, capture_output=True, text=True, timeout=120)
    assert stale.returncode == 1
    assert "-opencv=3.4.2" in stale.stdout and "regenerate: envfactory lock legacy" in stale.stdout
