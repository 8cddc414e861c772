"""kernel: kernel.json for an envfactory-created environment carries what the activation scripts
set; checked against the real bash activation of the same environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from string import Template

import pytest
from factories import created_project

from envfactory.errors import UserInputError
from envfactory.install.create import create_environment
from envfactory.install.kernel import install_kernel

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")


@pytest.fixture(scope="module")
def project(test_channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with a TF1 environment (variables included), locked and created (linux-64)."""
    root = tmp_path_factory.mktemp("kernel-project")
    manifest = (
        "environments:\n  legacy:\n    combo: tf114-cuda100\n    add: [pandas]\n"
        "    variables: {KERAS_BACKEND: tensorflow}\n"
    )
    created_project(test_channels, root, manifest, "legacy")
    return root


def test_cli_kernel_writes_the_activation_settings(project: Path, tmp_path: Path) -> None:
    env = dict(os.environ, JUPYTER_DATA_DIR=str(tmp_path / "jupyter"))
    proc = subprocess.run(
        [ENVFACTORY, "kernel", "legacy"], cwd=project, capture_output=True, text=True, env=env,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "jupyter/kernels/envfactory-legacy/kernel.json"
    assert f"registered kernel envfactory-legacy: {path}" in proc.stdout
    prefix = project / "envs" / "legacy"
    spec = json.loads(path.read_text())
    assert spec["argv"] == [
        f"{prefix}/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"
    ]  # fmt: skip
    assert spec["env"] == {
        "CONDA_PREFIX": str(prefix),
        "CUDA_PATH": "",
        "KERAS_BACKEND": "tensorflow",
        "LD_LIBRARY_PATH": f"{prefix}/lib",
        "PATH": f"{prefix}/bin:${{PATH}}",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    assert spec["display_name"] == "legacy (TensorFlow 1.14.0, CUDA 10.0)"
    # the stub environment has no ipykernel: said, not hidden
    assert "ipykernel is not installed" in proc.stderr


ACTIVATE = r"""
export CONDA_PREFIX="$PREFIX" CONDA_SHLVL=1 PATH="$PREFIX/bin:$PATH"
for f in "$PREFIX"/etc/conda/activate.d/*.sh; do . "$f"; done
printf 'PATH=%s\nLD_LIBRARY_PATH=%s\nTF_CPP_MIN_LOG_LEVEL=%s\nCUDA_PATH=%s\n' \
    "$PATH" "${LD_LIBRARY_PATH-}" "${TF_CPP_MIN_LOG_LEVEL-}" "${CUDA_PATH-}"
"""


def test_kernel_env_equals_what_activation_gives(project: Path, tmp_path: Path) -> None:
    """On a host whose LD_LIBRARY_PATH holds only a foreign CUDA and whose CUDA_PATH points at
    it, the kernel's environment (as jupyter_client substitutes it) and the activated shell's
    agree on PATH, LD_LIBRARY_PATH, TF_CPP_MIN_LOG_LEVEL and CUDA_PATH."""
    prefix = project / "envs" / "legacy"
    host = {
        "PATH": "/usr/bin:/bin",
        "LD_LIBRARY_PATH": "/usr/local/cuda-10.0/lib64",
        "CUDA_PATH": "/usr/local/cuda-10.0",
    }
    scripts = list((prefix / "etc/conda/activate.d").glob("*.sh"))
    assert scripts, "create installed no activation scripts"
    # the stubs run the environment's Python; the test channel's python is a stub without one
    python = prefix / "bin" / "python"
    if not python.exists():
        python.symlink_to(Path(sys.executable).resolve())
    proc = subprocess.run(
        ["bash", "-c", ACTIVATE], env={**host, "PREFIX": str(prefix)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    activated = dict(line.split("=", 1) for line in proc.stdout.splitlines())

    spec = install_kernel(prefix, target="env").spec
    # jupyter_client: env.update({k: Template(v).safe_substitute(env)}) over the server's env
    kernel = {**host, **{k: Template(v).safe_substitute(host) for k, v in spec["env"].items()}}
    for name in ("PATH", "LD_LIBRARY_PATH", "TF_CPP_MIN_LOG_LEVEL", "CUDA_PATH"):
        assert kernel.get(name, "") == activated[name], name


def test_target_env_and_a_win64_layout(test_channels: dict[str, Path], tmp_path: Path) -> None:
    from envfactory.catalog.loader import load_catalog
    from envfactory.solve.channels import ChannelMap
    from envfactory.solve.lock import LockRequest, lock_combo

    request = LockRequest.for_combo(
        load_catalog().combo("tf114-cuda100"),
        platforms=["win-64"],
        channel_map=ChannelMap({"defaults": test_channels["defaults"].as_uri()}),
        pip_index=str(test_channels["wheels"]),
    )
    lock_combo(request, tmp_path / "lock")
    prefix = tmp_path / "win"
    create_environment(tmp_path / "lock/conda-lock.yml", prefix, platform="win-64")
    result = install_kernel(prefix, target="env", name="tf1")
    assert result.path == prefix / "share/jupyter/kernels/tf1/kernel.json"
    env = json.loads(result.path.read_text())["env"]
    p = str(prefix)
    assert env["PATH"] == ";".join(
        [p, rf"{p}\Library\mingw-w64\bin", rf"{p}\Library\usr\bin", rf"{p}\Library\bin",
         rf"{p}\Scripts", rf"{p}\bin", "${PATH}"]
    )  # fmt: skip
    assert env["CUDA_PATH"] == rf"{p}\Library"
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert "LD_LIBRARY_PATH" not in env
    assert json.loads(result.path.read_text())["argv"][0] == rf"{p}\python.exe"


def test_a_prefix_envfactory_did_not_create_is_refused(tmp_path: Path) -> None:
    (tmp_path / "conda-meta").mkdir()
    with pytest.raises(UserInputError, match="not created by envfactory"):
        install_kernel(tmp_path)
