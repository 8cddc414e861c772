"""The lock's record (envfactory/lockfile/record.py): one typed value, written and read in one
place, round-trip exact, and locks written by envfactory 0.1 still readable and creatable.

tests/data/locks/envfactory-0.1-tf114-cuda100.conda-lock.yml was written by envfactory 0.1.0
(commit 8f5290d, before the record had a type or a version) with
``envfactory lock tf114-cuda100 -p linux-64`` against the test channels of
tests/channel_builder.py (file:///tmp/oldlock/ch/...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from envfactory.errors import UserInputError
from envfactory.install.create import create_environment
from envfactory.install.verify import verify_environment
from envfactory.lockfile.record import METADATA_VERSION, LockMetadata
from envfactory.solve.channels import ChannelMap

OLD_LOCK = Path(__file__).parent / "data" / "locks" / "envfactory-0.1-tf114-cuda100.conda-lock.yml"


def old_custom_metadata() -> dict[str, str]:
    data = YAML(typ="safe").load(OLD_LOCK.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in data["metadata"]["custom_metadata"].items()}


def test_a_lock_of_envfactory_0_1_reads_as_version_1() -> None:
    meta = LockMetadata.from_custom_metadata(old_custom_metadata(), where=str(OLD_LOCK))
    assert meta.version == 1
    assert meta.combo == "tf114-cuda100"
    assert meta.python == "3.7"
    assert meta.envfactory_version == "0.1.0"
    assert meta.channels == {"defaults": "file:///tmp/oldlock/ch/defaults"}
    assert meta.virtual_packages == {
        "linux-64": {"__cuda": "10.0", "__glibc": "2.17", "__linux": "5.10", "__unix": "0"}
    }
    assert meta.inputs["linux-64"]["pip"] == ["tensorflow-gpu==1.14.0"]
    assert meta.environment is None
    assert meta.variables == {}


def test_todays_writer_keeps_the_0_1_keys() -> None:
    """Reading a 0.1 record and writing it again gives the same keys and values, plus the
    version key: old and new envfactory read each other's locks."""
    old = old_custom_metadata()
    again = LockMetadata.from_custom_metadata(old, where="x").to_custom_metadata()
    assert again.pop("envfactory.metadata_version") == str(METADATA_VERSION)
    assert again == {
        k: (json.dumps(json.loads(v), sort_keys=True) if k.startswith("envfactory.inputs.") else v)
        for k, v in old.items()
    }


names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
values = st.text(st.characters(codec="utf-8"), max_size=20)
virtual_values = st.from_regex(r"\A[0-9][0-9.]{0,6}\Z")


@given(
    combo=st.none() | names,
    python=st.none() | st.sampled_from(["3.7", "3.11"]),
    channels=st.dictionaries(names, values, max_size=3),
    inputs=st.dictionaries(
        st.sampled_from(["linux-64", "win-64"]),
        st.dictionaries(names, st.lists(values, max_size=3) | values | st.none(), max_size=4),
        max_size=2,
    ),
    virtual=st.dictionaries(
        st.sampled_from(["linux-64", "win-64"]),
        st.dictionaries(st.from_regex(r"\A__[a-z]{1,6}\Z"), virtual_values, min_size=1),
        max_size=2,
    ),
    environment=st.none() | names,
    variables=st.dictionaries(st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,8}\Z"), values, max_size=3),
)
def test_round_trip_is_exact(
    combo: str | None,
    python: str | None,
    channels: dict[str, str],
    inputs: dict[str, dict[str, object]],
    virtual: dict[str, dict[str, str]],
    environment: str | None,
    variables: dict[str, str],
) -> None:
    meta = LockMetadata(
        combo=combo,
        python=python,
        channels=channels,
        inputs=inputs,  # type: ignore[arg-type]
        virtual_packages=virtual,  # type: ignore[arg-type]
        environment=environment,
        variables=variables if environment is not None else {},
    )
    back = LockMetadata.from_custom_metadata(meta.to_custom_metadata(), where="x")
    assert back == meta


def test_a_newer_record_is_refused_with_a_hint() -> None:
    meta = {**old_custom_metadata(), "envfactory.metadata_version": str(METADATA_VERSION + 1)}
    with pytest.raises(UserInputError, match="newer envfactory") as info:
        LockMetadata.from_custom_metadata(meta, where="locks/x/conda-lock.yml")
    assert "upgrade envfactory" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("envfactory.channels", "{not json", "not valid JSON"),
        ("envfactory.channels", '["a"]', "not a JSON object"),
        ("envfactory.variables", '{"A": 1}', "must map names to strings"),
        ("envfactory.inputs.linux-64", "[]", "not a JSON object"),
        ("envfactory.metadata_version", "one", "not a number"),
    ],
)
def test_a_damaged_record_is_a_user_error(key: str, value: str, message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        LockMetadata.from_custom_metadata({key: value}, where="x")


def test_a_lock_of_envfactory_0_1_still_creates(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    prefix = tmp_path / "env"
    result = create_environment(
        OLD_LOCK,
        prefix,
        platform="linux-64",
        channel_map=ChannelMap({"defaults": test_channels["defaults"].as_uri()}),
        wheel_dir=test_channels["wheels"],
    )
    assert result.conda > 0
    assert result.pip > 0
    assert verify_environment(prefix, lock=OLD_LOCK).identical


# --- the lock is the source of create's activation files (and of kernel's settings) ---------


@pytest.fixture(scope="module")
def tf114_lock_dir(
    test_channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    from envfactory.catalog.loader import load_catalog
    from envfactory.solve.lock import LockRequest, lock_combo

    request = LockRequest.for_combo(
        load_catalog().combo("tf114-cuda100"),
        platforms=["linux-64"],
        channel_map=ChannelMap({"defaults": test_channels["defaults"].as_uri()}),
        pip_index=str(test_channels["wheels"]),
    )
    out = tmp_path_factory.mktemp("lock")
    lock_combo(request, out)
    return out


def test_a_lock_records_the_activation_plan(tf114_lock_dir: Path) -> None:
    from envfactory.activation.plan import plan_for
    from envfactory.catalog.loader import load_catalog

    data = YAML(typ="safe").load((tf114_lock_dir / "conda-lock.yml").read_text())
    meta = LockMetadata.from_custom_metadata(data["metadata"]["custom_metadata"], where="x")
    combo = load_catalog().combo("tf114-cuda100")
    assert meta.activation == {"linux-64": plan_for(combo, "linux-64").runtime()}


def test_a_lock_for_a_combo_the_catalog_no_longer_has_still_creates_with_activation(
    tf114_lock_dir: Path, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    """The combo renamed away (as a later envfactory might): create installs the activation
    files the lock recorded, and kernel reads the plan create installed."""
    from envfactory.install.kernel import kernel_env, read_facts

    text = (tf114_lock_dir / "conda-lock.yml").read_text(encoding="utf-8")
    assert "envfactory.combo: tf114-cuda100" in text
    lock = tmp_path / "conda-lock.yml"
    lock.write_text(text.replace("envfactory.combo: tf114-cuda100", "envfactory.combo: tf114-gone"))
    prefix = tmp_path / "env"
    result = create_environment(
        lock,
        prefix,
        platform="linux-64",
        channel_map=ChannelMap({"defaults": test_channels["defaults"].as_uri()}),
        wheel_dir=test_channels["wheels"],
    )
    assert result.activation_note is None
    names = sorted(p.name for p in result.activation)
    assert "envfactory-tf114-cuda100.json" in names and "activation.py" in names
    assert "envfactory-tf114-cuda100.sh" in names
    facts = read_facts(prefix)
    assert facts.combo == "tf114-gone"
    # the installed plan is named after the recorded plan's combo (tf114-cuda100), not the
    # lock's (tf114-gone); kernel reads it all the same, with no catalog entry for tf114-gone
    env = kernel_env(facts)
    assert env["LD_LIBRARY_PATH"].startswith(f"{prefix}/lib")
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2"


def test_a_0_1_lock_takes_activation_from_the_catalog_and_says_so(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    result = create_environment(
        OLD_LOCK,
        tmp_path / "env",
        platform="linux-64",
        channel_map=ChannelMap({"defaults": test_channels["defaults"].as_uri()}),
        wheel_dir=test_channels["wheels"],
    )
    assert result.activation
    assert "records no activation plan (made by an older envfactory)" in (
        result.activation_note or ""
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(combo="../x"), "names no plain combo"),
        (lambda d: d.update(set=[["A;B", ["literal", "1"]]]), "not an identifier"),
        (lambda d: d.update(set=[["A", ["literal", "x\ny"]]]), "not \\[prefix\\|literal"),
        (lambda d: d.update(unset=["CUDA_PATH`x`"]), "not an identifier"),
        (lambda d: d.update(lists=[["PATH", [["shell", "/x"]]]]), "not \\[prefix\\|literal"),
        (lambda d: d.update(sep=";"), "wrong separators"),
        (lambda d: d.update(os="windows"), "is for os"),
        (lambda d: d.update(format=2), "has format 2"),
    ],
)
def test_a_recorded_plan_is_untrusted(edit: Any, message: str) -> None:
    from envfactory.activation.plan import ActivationPlan, plan_for
    from envfactory.catalog.loader import load_catalog

    data = json.loads(
        json.dumps(plan_for(load_catalog().combo("tf114-cuda100"), "linux-64").runtime())
    )
    assert ActivationPlan.from_runtime(data, "linux-64", where="x").runtime() == data
    edit(data)
    with pytest.raises(UserInputError, match=message):
        ActivationPlan.from_runtime(data, "linux-64", where="locks/x/conda-lock.yml")
