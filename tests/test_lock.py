"""Lock: real py-rattler solves against the local test channels, conda-lock's own writer and
reader, the post-solve checks, the channel map, and the CLI through the console script."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import envfactory
from envfactory.catalog.loader import load_catalog, load_catalog_from
from envfactory.catalog.model import Platform
from envfactory.errors import ToolError, UserInputError
from envfactory.lockfile.models import LockedPackage
from envfactory.solve.channels import ChannelMap, load_channel_map
from envfactory.solve.checks import check_solution
from envfactory.solve.lock import LockRequest, lock_combo, solve_platform
from envfactory.solve.lockreview import check_lock
from envfactory.solve.rattler_adapter import matches

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
CONDA_LOCK = str(Path(sys.executable).parent / "conda-lock")


def channel_map(channels: dict[str, Path]) -> ChannelMap:
    return ChannelMap({k: channels[k].as_uri() for k in ("defaults", "conda-forge")})


def request(channels: dict[str, Path], combo: str, *platforms: str, **kw: object) -> LockRequest:
    return LockRequest.for_combo(
        load_catalog().combo(combo),
        platforms=platforms,  # type: ignore[arg-type]
        channel_map=channel_map(channels),
        pip_index=str(channels["wheels"]),
        **kw,  # type: ignore[arg-type]
    )


def conda_set(packages: tuple[LockedPackage, ...]) -> dict[str, tuple[str, str]]:
    return {p.name: (p.version, p.build) for p in packages if p.manager == "conda"}


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVFACTORY, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


# ------------------------------------------------------------------------------------------
# Picks exactly the catalog's pins, never a decoy.


def test_tf114_cuda100_picks_the_catalog_pins_on_both_platforms(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    result = lock_combo(request(test_channels, "tf114-cuda100"), tmp_path)
    assert conda_set(result.packages["linux-64"]) == {
        "python": ("3.7.3", "h0371630_0"),
        "cudatoolkit": ("10.0.130", "0"),
        "cudnn": ("7.6.5", "cuda10.0_0"),
        "numpy": ("1.16.4", "py37h7e9f1db_0"),
        "scikit-image": ("0.16.2", "py37h0573a6f_0"),
        "pip": ("19.1.1", "py37_0"),
    }
    assert conda_set(result.packages["win-64"])["python"] == ("3.7.3", "h8c8aaf0_1")
    assert conda_set(result.packages["win-64"])["cudnn"] == ("7.6.5", "cuda10.0_0")
    targets: tuple[tuple[Platform, str], ...] = (
        ("linux-64", "manylinux1_x86_64"),
        ("win-64", "win_amd64"),
    )
    for platform, tag in targets:
        pip = {p.name: p for p in result.packages[platform] if p.manager == "pip"}
        wheel = pip["tensorflow-gpu"]
        assert wheel.version == "1.14.0"
        assert wheel.filename == f"tensorflow_gpu-1.14.0-cp37-cp37m-{tag}.whl"
        assert wheel.sha256 and len(wheel.sha256) == 64
        # numpy comes from conda and is not pip-installed again
        assert "numpy" not in pip
        assert {"tensorboard", "tensorflow-estimator", "protobuf"} <= set(pip)


def test_tf114_cuda101_conda_route_skips_the_decoys(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    result = lock_combo(request(test_channels, "tf114-cuda101"), tmp_path)
    found = conda_set(result.packages["linux-64"])
    assert found["tensorflow-gpu"] == ("1.14.0", "h0d30ee6_0")  # not the build-number-1 decoy
    assert found["tensorflow-base"] == ("1.14.0", "gpu_py37he45bfe2_0")  # not mkl
    assert found["_tflow_select"] == ("2.1.0", "gpu")
    assert found["numpy"][0] == "1.16.4"
    assert found["python"][0] == "3.7.3"


def test_tf210_cuda112_real_conda_forge_records(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    result = lock_combo(request(test_channels, "tf210-cuda112", "linux-64"), tmp_path)
    found = conda_set(result.packages["linux-64"])
    assert found["cudatoolkit"] == ("11.2.2", "hbe64b41_10")  # the pin, not pangeo's 11.8.0
    assert found["tensorflow-base"] == ("2.10.0", "cuda112py310hf679b68_0")
    assert found["cudnn"] == ("8.4.1.50", "hed8a83a_0")
    assert found["python"][0].startswith("3.10.")


def test_tf23_cuda101_win64_picks_the_catalog_pins(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    combo = load_catalog().combo("tf23-cuda101")
    result = lock_combo(request(test_channels, "tf23-cuda101", "win-64"), tmp_path)
    found = conda_set(result.packages["win-64"])
    pins = {p.name: (p.version, p.build) for p in combo.route("win-64").conda_pins("3.8")}
    assert pins == {
        "cudatoolkit": ("10.1.243", "h3826478_8"),
        "cudnn": ("7.6.5.32", "h36d860d_1"),
    }
    # exactly the pins: not the higher build number, not the CUDA 10.2 decoys
    assert {name: found[name] for name in pins} == pins
    assert found["python"][0] == "3.8.6"  # the default 3.8, not the 3.9 decoy
    assert set(found) == {*pins, "python", "pip", "setuptools", "wheel", "vc", "vs2015_runtime"}
    pip = {p.name: p for p in result.packages["win-64"] if p.manager == "pip"}
    wheel = pip["tensorflow"]
    assert wheel.version == "2.3.0"
    assert wheel.filename == "tensorflow-2.3.0-cp38-cp38-win_amd64.whl"
    assert wheel.sha256 and len(wheel.sha256) == 64
    # numpy comes from pip here (no conda numpy), within TF 2.3's <1.19
    assert pip["numpy"].version == "1.18.5"
    assert {"tensorboard", "tensorflow-estimator", "protobuf", "h5py", "scipy"} <= set(pip)
    assert not {"setuptools", "wheel", "pip"} & set(pip)  # conda provides them


# ------------------------------------------------------------------------------------------
# __cuda: envfactory refuses a GPU lock without it; the solver explains when a package needs it.


def test_gpu_combo_without_cuda_is_refused_before_solving(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    no_cuda = {"linux-64": {"__glibc": "2.17", "__unix": "0", "__linux": "5.10"}}
    req = request(test_channels, "tf114-cuda100", "linux-64", virtual_packages=no_cuda)
    with pytest.raises(UserInputError, match="lack __cuda") as info:
        lock_combo(req, tmp_path)
    assert info.value.hint and "__cuda" in info.value.hint
    assert not (tmp_path / "conda-lock.yml").exists()


def test_cli_virtual_package_spec_without_cuda(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    spec = tmp_path / "vp.yml"
    spec.write_text(
        "subdirs:\n  linux-64:\n    packages:\n      __glibc: '2.17'\n      __unix: '0'\n"
    )
    proc = run_cli(
        "lock", "tf114-cuda100", "-p", "linux-64", "--virtual-package-spec", str(spec),
        "--channel-map", f"defaults={test_channels['defaults']}", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "__cuda" in proc.stderr


def test_solver_names_cuda_when_a_package_needs_it(test_channels: dict[str, Path]) -> None:
    # conda-forge's real tensorflow-base 2.10.0 cuda112 build depends on __cuda.
    req = request(test_channels, "tf210-cuda112", "linux-64")
    no_cuda = {"__glibc": "2.17", "__linux": "5.10", "__unix": "0"}
    with pytest.raises(ToolError) as info:
        solve_platform(req, "linux-64", virtual=no_cuda)
    assert "__cuda" in info.value.message
    assert info.value.hint and "__cuda" in info.value.hint
    assert info.value.exit_code == 2


def test_unsatisfiable_exits_2_with_the_explanation(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    # defaults pointed at the conda-forge test channel: no cudatoolkit 10.0.130 there.
    proc = run_cli(
        "lock", "tf114-cuda100", "-p", "linux-64",
        "--channel-map", f"defaults={test_channels['conda-forge']}", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "no solution for tf114-cuda100 on linux-64" in proc.stderr
    assert "cudatoolkit" in proc.stderr
    assert "hint:" in proc.stderr and "channel map" in proc.stderr


# ------------------------------------------------------------------------------------------
# Post-solve checks, over real solutions with one package swapped.


@pytest.fixture(scope="module")
def cuda101_solution(test_channels: dict[str, Path]) -> tuple[LockRequest, list[LockedPackage]]:
    req = request(test_channels, "tf114-cuda101", "linux-64")
    return req, solve_platform(req, "linux-64")


def swapped(packages: list[LockedPackage], name: str, **changes: object) -> list[LockedPackage]:
    return [p._replace(**changes) if p.name == name else p for p in packages]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "changes", "found"),
    [
        ("tensorflow-base", {"build": "mkl_py37h7ce6ba3_0"}, "mkl_py37h7ce6ba3_0 (a CPU build)"),
        ("cudatoolkit", {"version": "10.0.130", "build": "0"}, "10.0.130 0"),
        ("cudnn", {"build": "cuda10.0_0"}, "7.6.5 cuda10.0_0"),
        ("numpy", {"version": "1.17.0"}, "1.17.0"),
        ("python", {"version": "3.8.0"}, "3.8.0"),
    ],
)
def test_checks_refuse_a_wrong_package(
    cuda101_solution: tuple[LockRequest, list[LockedPackage]],
    name: str,
    changes: dict[str, object],
    found: str,
) -> None:
    req, packages = cuda101_solution
    assert check_solution(req.spec("linux-64"), packages, matches) == []
    problems = check_solution(req.spec("linux-64"), swapped(packages, name, **changes), matches)
    assert any(p.package == name and found in p.found and p.expected for p in problems), problems


def test_checks_refuse_a_dependency_outside_the_lock(
    cuda101_solution: tuple[LockRequest, list[LockedPackage]],
) -> None:
    req, packages = cuda101_solution
    without_cupti = [p for p in packages if p.name != "cupti"]
    problems = check_solution(req.spec("linux-64"), without_cupti, matches)
    assert [(p.package, p.expected) for p in problems if "needed by" in p.expected] == [
        ("cupti", "'cupti' (needed by tensorflow-base)")
    ]


def test_checks_enforce_versions_of_unconfirmed_pins(test_channels: dict[str, Path]) -> None:
    # tf114-cuda100's linux-64 cudatoolkit/cudnn pins are unconfirmed; still enforced.
    req = request(test_channels, "tf114-cuda100", "linux-64")
    assert not all(p.confirmed for p in req.spec("linux-64").conda)
    packages = solve_platform(req, "linux-64")
    wrong = swapped(packages, "cudatoolkit", version="10.1.243", build="h6bb024c_0")
    problems = check_solution(req.spec("linux-64"), wrong, matches)
    assert any(p.package == "cudatoolkit" and "10.1.243" in p.found for p in problems)


# ------------------------------------------------------------------------------------------
# Files: conda-lock reads them, same bytes twice, --check.


def test_lock_files_are_deterministic_and_readable_by_conda_lock(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    req = request(test_channels, "tf114-cuda100")
    first = lock_combo(req, tmp_path / "a")
    second = lock_combo(req, tmp_path / "b")
    names = sorted(p.relative_to(tmp_path / "a").as_posix() for p in first.files)
    assert names == sorted(p.relative_to(tmp_path / "b").as_posix() for p in second.files)
    assert "conda-linux-64.lock" in names and "conda-win-64.lock" in names
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    explicit = (tmp_path / "a" / "conda-linux-64.lock").read_text()
    assert "@EXPLICIT" in explicit and "Regenerate: envfactory lock tf114-cuda100" in explicit
    lock_text = (tmp_path / "a" / "conda-lock.yml").read_text()
    assert "envfactory.virtual_packages.linux-64: __cuda=10.0,__glibc=2.17" in lock_text
    assert "manager: pip" in lock_text

    out = tmp_path / "rendered-{platform}.lock"
    proc = subprocess.run(
        [CONDA_LOCK, "render", "-k", "explicit", "-p", "linux-64", "-p", "win-64",
         "--filename-template", str(out), str(tmp_path / "a" / "conda-lock.yml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    theirs = {
        line for line in (tmp_path / "rendered-linux-64.lock").read_text().splitlines()
        if line.startswith("file://")
    }  # fmt: skip
    ours = {line for line in explicit.splitlines() if line.startswith("file://")}
    assert theirs == ours and len(ours) == 6


def test_check_fresh_then_stale_after_a_pin_changes(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    req = request(test_channels, "tf114-cuda100", "linux-64")
    lock_combo(req, tmp_path)
    assert check_lock(req, tmp_path).fresh

    data = tmp_path / "catalog"
    shutil.copytree(Path(envfactory.__file__).parent / "data", data)
    combos = data / "combos.yaml"
    combos.write_text(combos.read_text().replace('"numpy=1.16.4"', '"numpy=1.16.5"', 1))
    edited = load_catalog_from(data).combo("tf114-cuda100")
    result = check_lock(dataclasses.replace(req, combo=edited), tmp_path)
    assert not result.fresh
    assert any("numpy=1.16.4" in r and "numpy=1.16.5" in r for r in result.reasons), result


def test_cli_lock_then_check(test_channels: dict[str, Path], tmp_path: Path) -> None:
    defaults, wheels = test_channels["defaults"], test_channels["wheels"]
    args = ["tf114-cuda100", "-p", "linux-64", "--channel-map", f"defaults={defaults}",
            "--pip-index", str(wheels)]  # fmt: skip
    proc = run_cli("lock", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # 23: uv evaluates markers for python 3.7, so markdown's importlib-metadata (and its zipp,
    # typing-extensions) are locked too; pip's resolver, evaluating them for the host, left them out
    assert "linux-64: 6 conda + 23 pip packages" in proc.stdout
    assert (tmp_path / "locks/tf114-cuda100/conda-lock.yml").is_file()
    fresh = run_cli("lock", *args, "--check", cwd=tmp_path)
    assert fresh.returncode == 0 and "up to date" in fresh.stdout
    moved = tmp_path / "mirror"
    shutil.copytree(test_channels["defaults"], moved)
    stale = run_cli("lock", *args, "--channel-map", f"defaults={moved}", "--check", cwd=tmp_path)
    assert stale.returncode == 1
    assert "stale" in stale.stdout and "channels changed" in stale.stdout


# ------------------------------------------------------------------------------------------
# Channel map and the conda-lock solver mode.


def test_channel_map_sources_and_precedence(tmp_path: Path) -> None:
    config = tmp_path / "envfactory.toml"
    config.write_text('[channels]\ndefaults = "file:///srv/a"\nnvidia = "mirror/nvidia"\n')
    env = {"ENVFACTORY_CHANNEL_MAP": "defaults=file:///srv/b,conda-forge=https://m.example/cf"}
    cmap = load_channel_map(["conda-forge=/srv/c"], environ=env, config=config)
    assert cmap.url("defaults") == "file:///srv/b"
    assert cmap.url("conda-forge") == "file:///srv/c"
    assert cmap.url("nvidia") == (tmp_path / "mirror/nvidia").as_uri()
    assert load_channel_map([], environ={}, config=tmp_path / "none.toml").url("defaults") == (
        "https://repo.anaconda.com/pkgs/main"
    )
    with pytest.raises(UserInputError) as info:
        load_channel_map(["defaults"], environ={}, config=config)
    assert info.value.hint and "NAME=URL" in info.value.hint


def test_solver_conda_lock_without_conda_fails_at_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CONDA_EXE", "MAMBA_EXE")}
    env["PATH"] = str(tmp_path)  # no conda, mamba or micromamba here
    start = time.monotonic()
    proc = run_cli("lock", "tf114-cuda100", "-p", "linux-64", "--solver", "conda-lock",
                   cwd=tmp_path, env=env)  # fmt: skip
    assert time.monotonic() - start < 30
    assert proc.returncode == 2, proc.stderr
    assert "conda, mamba or micromamba" in proc.stderr and "micromamba" in proc.stderr
