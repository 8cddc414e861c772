"""The README's first hour: the install line and the offline quick start, run as typed.

The offline quick start needs no channel on the network: examples/offline/channel is a local
channel of real conda-forge records (tiny payloads) that scripts/build-example-channel writes;
the first test holds the committed channel to what that script writes from the real data.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLE = ROOT / "examples" / "offline"
BIN = Path(sys.executable).parent


def block(marker: str) -> list[str]:
    """The shell lines of a README block, as typed (comments and all)."""
    text = README.read_text(encoding="utf-8")
    part = text.split(f"<!-- {marker}:begin -->", 1)[1].split(f"<!-- {marker}:end -->", 1)[0]
    return [line for line in part.split("```sh\n", 1)[1].split("```", 1)[0].splitlines() if line]


def offline_env(tmp_path: Path, path: str) -> dict[str, str]:
    """The user's environment, less anything that would point envfactory at a channel."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENVFACTORY_CHANNEL", "ENVFACTORY_PIP", "CONDA_ENVS"))
    }
    env.update(PATH=path, HOME=str(tmp_path / "home"), CONDA_REGISTER_ENVS="true")
    return env


@pytest.mark.slow
def test_the_example_channel_is_what_the_builder_writes(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    from channel_builder import build_example_channel

    fresh = build_example_channel(tmp_path / "channel", test_channels["conda-forge"], tmp_path)
    committed = EXAMPLE / "channel"

    def files(root: Path) -> dict[str, object]:
        return {
            p.relative_to(root).as_posix(): comparable(p) for p in root.rglob("*") if p.is_file()
        }

    want, have = files(fresh), files(committed)
    assert sorted(have) == sorted(want), "run scripts/build-example-channel"
    assert [n for n in want if want[n] != have[n]] == [], "run scripts/build-example-channel"
    assert len([n for n in want if n.endswith(".tar.bz2")]) == 117


def comparable(path: Path) -> object:
    """A file's bytes; a repodata.json's records less ``indexed_timestamp``, the time
    rattler's index ran (archives are byte-reproducible, that field is not)."""
    if path.name != "repodata.json":
        return path.read_bytes()
    doc = json.loads(path.read_bytes())
    for key in ("packages", "packages.conda"):
        for record in doc.get(key, {}).values():
            record.pop("indexed_timestamp", None)
    return doc


def run_offline_quick_start(tmp_path: Path, checkout: Path, env: dict[str, str]) -> None:
    lines = block("quickstart")
    assert lines[0] == "cd examples/offline"
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    proc = subprocess.run(
        ["bash", "-c", script], cwd=checkout, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    prefix = checkout / "examples" / "offline" / "envs" / "tf210"
    assert f"envs/tf210 is identical to {prefix.parent.parent}" in proc.stdout
    lock = prefix.parent.parent / "locks" / "tf210-cuda112" / "conda-lock.yml"
    # every package came from the example channel, by its file:// URL
    doc = yaml.safe_load(lock.read_text())
    urls = [c["url"] for c in doc["metadata"]["channels"]] + [p["url"] for p in doc["package"]]
    assert len(urls) == 118  # the channel's own entry + 117 packages
    channel = (checkout / "examples" / "offline" / "channel").resolve().as_uri()
    assert all(u.startswith(channel) for u in urls), urls[:3]
    # and it is where 'conda env list' looks, as conda registers what it creates
    listing = Path(env["HOME"]) / ".conda" / "environments.txt"
    assert listing.read_text().splitlines() == [str(prefix.resolve())]


@pytest.mark.slow
def test_the_offline_quick_start_runs_as_typed(tmp_path: Path) -> None:
    """In a copy of examples/offline, with envfactory on PATH as the install line leaves it."""
    checkout = tmp_path / "checkout"
    shutil.copytree(
        EXAMPLE, checkout / "examples" / "offline", ignore=shutil.ignore_patterns("locks", "envs")
    )
    env = offline_env(tmp_path, f"{BIN}{os.pathsep}{os.environ['PATH']}")
    run_offline_quick_start(tmp_path, checkout, env)


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("ENVFACTORY_TEST_INSTALL"),
    reason="~2 min of pip installing from PyPI; ENVFACTORY_TEST_INSTALL=1 runs it",
)
def test_the_install_line_and_the_offline_quick_start_run_as_typed(tmp_path: Path) -> None:
    """A fresh checkout (the repository's files), the install block as typed (python3, pip from
    PyPI), then the offline quick start in the same shell: nothing else on PATH. Opt-in: it
    costs about 2 minutes, twice what one issue may add to CI."""
    checkout = tmp_path / "checkout"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, checkout / name)
    python3 = shutil.which("python3")
    assert python3 is not None
    env = offline_env(tmp_path, f"{Path(python3).parent}{os.pathsep}/usr/bin{os.pathsep}/bin")
    env.setdefault("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))  # HOME is a new one
    install = "set -euo pipefail\n" + "\n".join(block("install")) + "\n"
    script = install + "\n".join(block("quickstart")) + "\n"
    proc = subprocess.run(
        ["bash", "-c", script], cwd=checkout, env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert (checkout / ".venv" / "bin" / "envfactory").is_file()
    assert "envs/tf210 is identical to" in proc.stdout
