"""What users read: the messages of issue 29, as a table of command lines and what they must say.

Each row runs the real CLI (``envfactory.cli.run``) as a user would type it; the expected text
comes from the issue's report of what misled a new user, not from the code under test.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.catalog.loader import load_catalog
from envfactory.cli import run

ENVFACTORY = str(Path(sys.executable).with_name("envfactory"))


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- did you mean: a TensorFlow version as users write it finds that version's combos ---------

TF210 = sorted(c.name for c in load_catalog() if c.tf_series == (2, 10))


@pytest.mark.parametrize("typed", ["tf210", "tf2.10", "2.10", "tensorflow 2.10", "TF-2.10.1"])
def test_a_version_finds_its_combos(capsys: pytest.CaptureFixture[str], typed: str) -> None:
    code, _out, err = cli(capsys, "show", typed)
    assert code == 1
    hint = next(line for line in err.splitlines() if line.startswith("hint: "))
    named = re.findall(r"tf\d+-cuda\d+", hint)
    assert sorted(named) == TF210 == ["tf210-cuda112", "tf210-cuda113"], hint


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("tf114-cuda10", {"tf114-cuda100", "tf114-cuda101"}),  # the CUDA part mistyped
        ("tf1.15", {"tf115-cuda100"}),
        ("tensorflow 2.4", {"tf24-cuda101", "tf24-cuda110"}),
    ],
)
def test_a_version_with_other_words(
    capsys: pytest.CaptureFixture[str], typed: str, expected: set[str]
) -> None:
    _code, _out, err = cli(capsys, "render", typed)
    hint = next(line for line in err.splitlines() if line.startswith("hint: "))
    assert set(re.findall(r"tf\d+-cuda\d+", hint)) == expected, err


# --- GPU names as users type them -----------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "model", "note"),
    [
        ("rtx3080", "GeForce RTX 3080", None),
        ("RTX3080", "GeForce RTX 3080", None),
        ("RTX 3080", "GeForce RTX 3080", None),
        ("3080", "GeForce RTX 3080", "read as"),
        ("3080 ti", "GeForce RTX 3080", "no row for the TI variant"),
        ("rtx3080ti", "GeForce RTX 3080", "no row for the TI variant"),
        ("1080 ti", "GeForce GTX 1080 Ti", "read as"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100", None),
    ],
)
def test_gpu_names_as_typed(
    capsys: pytest.CaptureFixture[str], typed: str, model: str, note: str | None
) -> None:
    code, out, err = cli(capsys, "compat", "tf210-cuda112", "--gpu", typed, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["gpu"]["name"] == model
    if note is None:
        assert doc["gpu"]["match_note"] is None
    else:
        assert note in doc["gpu"]["match_note"]


# --- recommend: ordered as its help says ----------------------------------------------------


def test_recommend_is_ordered_as_its_help_says(capsys: pytest.CaptureFixture[str]) -> None:
    code, help_text, _err = cli(capsys, "recommend", "--help")
    assert code == 0
    flat = " ".join(help_text.split())
    assert (
        "native kernels before PTX JIT; then fewer unconfirmed catalog facts" in flat
        and "then newest TensorFlow" in flat
    ), flat
    code, out, _err = cli(
        capsys, "recommend", "--cc", "8.6", "--driver", "550.54", "--platform", "linux-64",
        "--json",
    )  # fmt: skip
    assert code == 0
    combos = json.loads(out)["combos"]
    catalog = load_catalog()

    def rule(row: dict[str, object]) -> tuple[int, int, tuple[int, ...]]:
        tf = tuple(-int(x) for x in str(row["tensorflow"]).split(".")[:2])
        return (0 if row["verdict"] == "supported" else 1, int(str(row["unconfirmed"])), tf)

    keys = [rule(r) for r in combos]
    assert keys == sorted(keys), [r["combo"] for r in combos]
    # the count shown is the catalog's: unconfirmed pins and GPU code lists of that platform
    for row in combos:
        route = catalog.combo(str(row["combo"])).route("linux-64")
        doubts = sum(not p.confirmed for p in route.all_pins()) + (not route.targets.confirmed)
        assert row["unconfirmed"] == doubts, row["combo"]
    # and the text says it where it decides the order
    code, text, _err = cli(
        capsys, "recommend", "--cc", "8.6", "--driver", "550.54", "--platform", "linux-64"
    )
    for row in combos:
        shown = f"{row['combo']}: {row['verdict']}"
        if row["unconfirmed"]:
            shown += f" ({row['unconfirmed']} unconfirmed)"
        assert f"\n{shown}\n" in text


# --- --json: an error is a JSON object on stdout, with the exit code ------------------------


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (["show", "tf2.10", "--json"], 1, "unknown combo 'tf2.10'"),
        (["compat", "tf210-cuda112", "--gpu", "no such gpu", "--json"], 1, "unknown GPU"),
        (["list", "--json", "--bogus"], 1, "No such option: --bogus"),
        (["verify", "/nonexistent/env", "--json"], 1, "/nonexistent/env is missing"),
        (["recommend", "--cc", "1.0", "--platform", "linux-64", "--json"], 3, None),
    ],
)
def test_json_errors_are_json_on_stdout(
    capsys: pytest.CaptureFixture[str], args: list[str], code: int, error: str | None
) -> None:
    got, out, err = cli(capsys, *args)
    assert got == code
    doc = json.loads(out)  # stdout is one JSON document, error or not
    assert err == ""
    if error is not None:
        assert error in doc["error"]
        assert doc["exit_code"] == code
        assert doc["hint"]
        assert doc["exception_name"]


def test_errors_without_json_stay_text_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "show", "tf2.10")
    assert (code, out) == (1, "")
    assert err.startswith("error: unknown combo 'tf2.10'\nhint: did you mean ")


# --- explain on a terminal says how to paste and end input ---------------------------------


def test_explain_on_a_terminal_says_how_to_end_input(tmp_path: Path) -> None:
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [ENVFACTORY, "explain"], stdin=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    os.close(child)
    # one Ctrl-D (an empty read, not a lasting end of file) ends the input, as the line says
    os.write(main, b"Could not load dynamic library 'libcudart.so.10.0'; dlerror: x\n\x04")
    out, err = proc.communicate(timeout=60)
    os.close(main)
    assert "paste the log here, then press Ctrl-D on an empty line" in err.decode()
    assert proc.returncode == 0, err  # a note, not a problem, on a machine without a GPU
    assert b"[cudart-not-found, note]" in out


def test_explain_from_a_pipe_prints_no_prompt() -> None:
    proc = subprocess.run(
        [ENVFACTORY, "explain"], input=b"all good\n", capture_output=True, timeout=60
    )
    assert proc.returncode == 0
    assert proc.stderr == b""


# --- doctor: a prefix that is not the combo named -------------------------------------------


def _fake_prefix(root: Path, packages: dict[str, str]) -> Path:
    meta = root / "conda-meta"
    meta.mkdir(parents=True)
    for name, version in packages.items():
        record = {"name": name, "version": version, "build": "h0_0", "channel": "conda-forge"}
        (meta / f"{name}-{version}-h0_0.json").write_text(json.dumps(record))
    return root


def _doctor_findings(prefix: Path, combo: str) -> dict[str, str]:
    proc = subprocess.run(
        [ENVFACTORY, "doctor", combo, "-p", str(prefix), "--platform", "linux-64", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode in (0, 3), proc.stderr
    return {f["id"]: f["message"] for f in json.loads(proc.stdout)["findings"]}


def test_doctor_warns_when_the_prefix_is_another_combo(tmp_path: Path) -> None:
    tf210 = _fake_prefix(
        tmp_path / "tf210",
        {"tensorflow-base": "2.10.0", "cudatoolkit": "11.2.2", "cudnn": "8.4.1.50"},
    )
    found = _doctor_findings(tf210, "tf114-cuda100")
    assert "combo-prefix-mismatch" in found
    assert "TensorFlow 2.10.0, not 1.14.0" in found["combo-prefix-mismatch"]
    assert "cudatoolkit 11.2.2, not 10.0.130" in found["combo-prefix-mismatch"]
    assert "combo-prefix-mismatch" not in _doctor_findings(tf210, "tf210-cuda112")


# --- verify and create: what a missing thing is called --------------------------------------


def test_verify_of_a_missing_directory_says_it_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _out, err = cli(capsys, "verify", str(tmp_path / "gone"))
    assert code == 1
    assert f"error: {tmp_path / 'gone'} is missing (no such directory)" in err
    assert "which lock built it" not in err


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("tf114-cuda10", "did you mean tf114-cuda100, tf114-cuda101?"),
        ("tf2.10", "did you mean tf210-cuda112, tf210-cuda113?"),
        ("nothing-like-it", "is not a project environment, a combo"),
    ],
)
def test_create_of_a_typo_does_not_suggest_locking_it(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    hint: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _out, err = cli(capsys, "create", name, "-p", str(tmp_path / "env"))
    assert code == 1
    assert hint in err
    assert f"envfactory lock {name}" not in err


def test_create_of_a_combo_without_a_lock_says_how_to_lock_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _out, err = cli(capsys, "create", "tf114-cuda100", "-p", str(tmp_path / "env"))
    assert code == 1
    assert "hint: run 'envfactory lock tf114-cuda100' first" in err
