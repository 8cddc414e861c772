"""kernel against hostile names and prefixes (issue 10, row 11, item 8): it never overwrites a
kernel it did not write for this prefix (refuses, or ``--replace``), kernel names are plain
names, and the prefix reaches the kernel literally -- jupyter_client substitutes ``$NAME`` in a
kernelspec's env (``string.Template.safe_substitute``, modelled here exactly) and ``{field}`` in
its argv. A damaged ``conda-meta/envfactory.json`` is an error with a hint, not a traceback,
for kernel and verify alike."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from string import Template

import pytest
from factories import created_project

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")


@pytest.fixture(scope="module")
def created(test_channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with a TF1 environment, locked and created (linux-64): its prefix."""
    manifest = (
        "environments:\n  legacy:\n    combo: tf114-cuda100\n    variables: {DATA_DIR: /srv/data}\n"
    )
    return created_project(
        test_channels, tmp_path_factory.mktemp("hostile-kernel"), manifest, "legacy"
    )


def kernel(*args: str, data: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, JUPYTER_DATA_DIR=str(data))
    return subprocess.run(
        [ENVFACTORY, "kernel", "x", *args], capture_output=True, text=True, env=env, timeout=60
    )


def assert_refused(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    error, hint = proc.stderr.splitlines()[:2]
    assert error.startswith("error: ") and hint.startswith("hint: "), proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_users_kernel_is_not_replaced_without_replace(created: Path, tmp_path: Path) -> None:
    data = tmp_path / "jupyter"
    theirs = data / "kernels" / "python3" / "kernel.json"
    theirs.parent.mkdir(parents=True)
    theirs.write_text('{"argv": ["python3"], "display_name": "Python 3"}\n')
    proc = kernel("-p", str(created), "--name", "python3", data=data)
    assert_refused(proc, "a kernel named python3 exists already", "envfactory did not write it",
                   "--replace")  # fmt: skip
    assert theirs.read_text() == '{"argv": ["python3"], "display_name": "Python 3"}\n'
    proc = kernel("-p", str(created), "--name", "python3", "--replace", data=data)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(theirs.read_text())["metadata"]["envfactory"]["prefix"] == str(created)


def test_two_prefixes_of_one_combo_do_not_overwrite_each_other(
    created: Path, tmp_path: Path
) -> None:
    data = tmp_path / "jupyter"
    other = tmp_path / "copy" / "legacy"
    shutil.copytree(created / "conda-meta", other / "conda-meta")
    first = kernel("-p", str(created), data=data)
    assert first.returncode == 0, first.stderr
    path = data / "kernels" / "envfactory-legacy" / "kernel.json"
    written = path.read_bytes()
    assert kernel("-p", str(created), data=data).returncode == 0  # its own: rewritten in place
    assert path.read_bytes() == written
    second = kernel("-p", str(other), data=data)
    assert_refused(second, f"envfactory wrote it for {created}", "--name")
    assert path.read_bytes() == written
    third = kernel("-p", str(other), "--name", "legacy-copy", data=data)
    assert third.returncode == 0, third.stderr
    assert sorted(p.name for p in (data / "kernels").iterdir()) == [
        "envfactory-legacy", "legacy-copy"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "name", ["../../x", "a/b", "..", ".hidden", "-rf", "x\n", "x y", "/abs", "x\\y", ""]
)
def test_kernel_names_are_plain_names(created: Path, tmp_path: Path, name: str) -> None:
    data = tmp_path / "jupyter" / "deep" / "er"
    data.mkdir(parents=True)
    before = files(tmp_path)
    proc = kernel("-p", str(created), "--name", name, data=data)
    assert_refused(proc, "is not a plain name")
    assert files(tmp_path) == before


def test_a_dollar_in_the_prefix_reaches_the_kernel_literally(created: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "env$HOME${PATH}$$x"
    shutil.copytree(created / "conda-meta", prefix / "conda-meta")
    data = tmp_path / "jupyter"
    proc = kernel("-p", str(prefix), data=data)
    assert proc.returncode == 0, proc.stderr
    spec = json.loads((data / "kernels/envfactory-legacy/kernel.json").read_text())
    server = {"HOME": "/home/server", "PATH": "/usr/bin"}
    # what jupyter_client does to each env value before it starts the kernel
    env = {k: Template(v).safe_substitute(server) for k, v in spec["env"].items()}
    assert env["CONDA_PREFIX"] == str(prefix)
    assert env["LD_LIBRARY_PATH"] == f"{prefix}/lib"
    assert env["PATH"] == f"{prefix}/bin:/usr/bin"  # only the server's ${PATH} is substituted
    assert env["DATA_DIR"] == "/srv/data"
    assert spec["argv"][0] == f"{prefix}/bin/python"


def test_a_prefix_holding_an_argv_field_is_refused(created: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "{connection_file}"
    shutil.copytree(created / "conda-meta", prefix / "conda-meta")
    proc = kernel("-p", str(prefix), data=tmp_path / "jupyter")
    assert_refused(proc, "contains {connection_file}, which jupyter_client replaces")
    assert not (tmp_path / "jupyter").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        (b"{", "is not JSON"),
        (b"[]", "is not a JSON object"),
        (b'{"platform": "linux-64"}', "'lock' is missing"),
        (b'{"lock": "x", "platform": "../x"}', "unknown platform"),
        (b'{"lock": "x", "platform": "linux-64", "combo": 5}', "'combo' is not a string"),
        (b'{"lock": "x", "platform": "linux-64", "combo": "../x"}', "is not a plain name"),
        (b"\xff\xfe{", "is not UTF-8"),
    ],
)
def test_a_damaged_marker_is_an_error_with_a_hint(
    created: Path, tmp_path: Path, marker: bytes, expected: str
) -> None:
    prefix = tmp_path / "env"
    shutil.copytree(created / "conda-meta", prefix / "conda-meta")
    (prefix / "conda-meta" / "envfactory.json").write_bytes(marker)
    proc = kernel("-p", str(prefix), data=tmp_path / "jupyter")
    assert_refused(proc, expected, "hint: recreate the environment")
    assert not (tmp_path / "jupyter").exists()
    verify = subprocess.run(
        [ENVFACTORY, "verify", str(prefix)], capture_output=True, text=True, timeout=60
    )
    if expected == "is not UTF-8":  # verify reads the marker leniently; then it is not JSON
        expected = "is not JSON"
    assert_refused(verify, expected, "hint: recreate the environment")
