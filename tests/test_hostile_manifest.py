"""Hostile manifests (issue 10, rows 5, 10, 12, 13 and item 3): envfactory.yaml and
envfactory.toml come with a project repository, so a pull request can change them. Names are
checked with ``fullmatch`` (``^...$`` let ``"abc\\n"`` through), YAML keys must be strings
(``null:`` became an environment named 'None'), ``variables:`` values must survive conda's
activators verbatim, strings that reach environment.yml or pip's requirements are one line, and
the YAML is bounded. Every refusal is a ``UserInputError`` naming file and line; through the CLI
it is ``error:`` + ``hint:``, exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.errors import UserInputError
from envfactory.project.manifest import load_project

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")

GOOD = "environments:\n  legacy:\n    combo: tf114-cuda100\n"


def refused(tmp_path: Path, text: str) -> UserInputError:
    path = tmp_path / "envfactory.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserInputError) as info:
        load_project(path)
    assert info.value.hint
    return info.value


def with_variables(body: str) -> str:
    return GOOD + "    variables:\n" + body


def test_the_base_manifest_loads(tmp_path: Path) -> None:
    path = tmp_path / "envfactory.yaml"
    path.write_text(with_variables("      DATA: /srv/data\n"), encoding="utf-8")
    assert dict(load_project(path).environment("legacy").variables) == {"DATA": "/srv/data"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # row 13: ^...$ accepted a trailing newline; fullmatch does not
        ('environments:\n  "legacy\\n":\n    combo: tf114-cuda100\n', "is not a plain name"),
        (with_variables('      "DATA\\n": x\n'), "'DATA\\n' is not an environment variable name"),
        # row 13: non-string keys are refused, not coerced
        ("environments:\n  null:\n    combo: tf114-cuda100\n", "the key None is null"),
        ("environments:\n  1.5:\n    combo: tf114-cuda100\n", "the key 1.5 is a number"),
        ("environments:\n  true:\n    combo: tf114-cuda100\n", "the key True is a boolean"),
        ("environments:\n  [a, b]:\n    combo: tf114-cuda100\n", "is a list or mapping"),
        (with_variables("      null: x\n"), "the key None is null"),
        (with_variables("      12: x\n"), "the key 12 is a number"),
        # names with separators, as before
        ("environments:\n  ../up:\n    combo: tf114-cuda100\n", "is not a plain name"),
        ("environments:\n  $(touch M):\n    combo: tf114-cuda100\n", "is not a plain name"),
        # row 5: values conda's activators would run or mangle
        (with_variables("      X: \"a'; touch M; '\"\n"), "contains ''', which ends posix sh's"),
        (with_variables('      X: "`touch M`"\n'), "contains '`', which runs a command in csh"),
        (with_variables('      X: "$(touch M)"\n'), "contains '$', which expands in csh"),
        (with_variables('      X: "a\\"b"\n'), "contains '\"', which ends csh's"),
        (with_variables('      X: "100%"\n'), "contains '%', which expands in cmd"),
        (with_variables('      X: "a\\nb"\n'), "contains the control character U+000A"),
        (with_variables('      X: "a\\tb"\n'), "contains the control character U+0009"),
        (with_variables('      X: "C:\\\\new"\n'), "a backslash followed by 'n'"),
        (with_variables('      X: "C:\\\\Users"\n'), "a backslash followed by 'U'"),
        (with_variables('      X: "C:\\\\dir\\\\"\n'), "ends with a backslash"),
        (with_variables('      X: "\\u201cq\\u201d"\n'), "is a double quote to PowerShell"),
        (with_variables('      X: "***unset***"\n'), "conda's marker for 'unset this variable'"),
        (with_variables("      PATH: /x\n"), "PATH is set by conda or by the combo's"),
        # item 3: strings that reach environment.yml and pip's requirements file
        (GOOD + '    add: ["pandas\\n  - evil"]\n', "'add' entry it contains U+000A"),
        (
            GOOD + '    pip: ["requests\\n--index-url http://evil"]\n',
            "'pip' entry it contains U+000A",
        ),
        (GOOD + '    pip: ["x @ file:///a/../b.whl"]\n', "'.' or '..' path segment"),
        (GOOD + '    channels: ["conda-forge\\n- evil"]\n', "neither a channel name nor"),
        (GOOD + '    channels: ["ftp://mirror/x"]\n', "not an http(s):// or file:// URL"),
        (GOOD + '    channels: ["../../etc"]\n', "neither a channel name nor"),
        # row 10 and 12: bounded YAML
        (
            "a: &a [x,x,x,x,x,x,x,x,x]\n"
            + "".join(
                f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            )
            + GOOD,
            "aliases expand to more than",
        ),
        ("environments: " + "[" * 3000 + "]" * 3000 + "\n", "nests deeper than 64 levels"),
    ],
)
def test_a_hostile_manifest_is_refused_with_file_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    error = refused(tmp_path, text)
    assert expected in error.message
    assert str(tmp_path / "envfactory.yaml") in error.message


@pytest.mark.parametrize(
    "value",
    [
        "/srv/data", "C:/Users/me/data", r"C:\data\models", "a b  c",
        "caf\u00e9 \u6570\u636e \U0001f600", "x=y;z|w&v<u>t", "~user/*.txt", "^caret",
        "(paren)", "{brace}", "semi;colon", "#hash", "",
    ],
)  # fmt: skip
def test_values_conda_carries_verbatim_are_accepted(tmp_path: Path, value: str) -> None:
    path = tmp_path / "envfactory.yaml"
    quoted = value.replace("\\", "\\\\")
    path.write_text(with_variables(f'      X: "{quoted}"\n'), encoding="utf-8")
    assert load_project(path).environment("legacy").variables["X"] == value


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("envfactory.yaml", GOOD.replace("legacy", "l\u00e9gacy").encode("latin-1"), "not UTF-8"),
        ("envfactory.yaml", GOOD.encode("utf-16"), "is UTF-16 or UTF-32"),
        ("envfactory.toml", '[channels]\nx = "/srv/caf\u00e9"\n'.encode("latin-1"), "not UTF-8"),
        ("envfactory.toml", '[channels]\ndefaults = "/srv"\n'.encode("utf-16"), "is UTF-16"),
    ],
    ids=["yaml-latin-1", "yaml-utf-16", "toml-latin-1", "toml-utf-16"],
)  # fmt: skip
def test_project_files_in_another_encoding_end_in_error_and_hint(
    tmp_path: Path, name: str, data: bytes, expected: str
) -> None:
    if name == "envfactory.toml":
        (tmp_path / "envfactory.yaml").write_text(GOOD, encoding="utf-8")
    (tmp_path / name).write_bytes(data)
    proc = subprocess.run(
        [ENVFACTORY, "lock", "--check"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error: ") and expected in lines[0], proc.stderr
    assert lines[1].startswith("hint: save it as UTF-8"), proc.stderr


def test_a_manifest_bomb_through_the_cli(tmp_path: Path) -> None:
    laughs = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    (tmp_path / "envfactory.yaml").write_text(laughs + GOOD, encoding="utf-8")
    proc = subprocess.run(
        [ENVFACTORY, "lock", "--check"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and "aliases expand" in proc.stderr
    assert "\nhint: " in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("text", ["pandas\n", "x\n- evil", "a: b", "end:", "\u2028", "'q'"])
def test_the_yaml_filter_never_writes_a_line_break_or_mapping_bare(text: str) -> None:
    """The last line of defence for environment.yml: ``yaml_str`` wrote ``"pandas\\n"`` bare
    (its pattern was ``^...$`` with ``match``); whatever it writes reads back as the string."""
    from ruamel.yaml import YAML

    from envfactory.activation.templating import yaml_str

    written = yaml_str(text)
    assert "\n" not in written
    assert YAML(typ="safe").load(f"key: {written}\n") == {"key": text}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('defaults = "http://mirror/main\\n--x"', "contains U+000A"),
        ('defaults = "http://mirror/a b"', "contains U+0020"),
        ('defaults = "ftp://mirror/main"', "not an http(s):// or file:// URL"),
        ('"de faults" = "http://mirror/main"', "neither a channel name nor"),
    ],
)
def test_a_hostile_channel_map_in_envfactory_toml_is_refused(
    tmp_path: Path, entry: str, expected: str
) -> None:
    from envfactory.solve.channels import load_channel_map

    path = tmp_path / "envfactory.toml"
    path.write_text(f"[channels]\n{entry}\n", encoding="utf-8")
    with pytest.raises(UserInputError) as info:
        load_channel_map(config=path, environ={})
    assert expected in info.value.message and str(path) in info.value.message


def test_a_local_directory_with_spaces_is_still_a_channel(tmp_path: Path) -> None:
    from envfactory.solve.channels import load_channel_map

    path = tmp_path / "envfactory.toml"
    path.write_text('[channels]\ndefaults = "my mirror/main"\n', encoding="utf-8")
    url = load_channel_map(config=path, environ={}).url("defaults")
    assert url == (tmp_path / "my mirror" / "main").as_uri() and " " not in url
