"""envfactory on a Windows host, for real: the official CPython 3.11 for Windows runs this
checkout and its win_amd64 dependency wheels (py-rattler, uv, ...) under wine
(tests/shells/winhost.py). One wine process runs the command lines below, in a user folder
named C:\\Users\\张三 and an environment folder with a space: list, show, render, lock against the
local test channels, create, verify, audit, explain, compat, doctor, kernel, mirror, cache.
Then the created environment's .bat activation runs under wine's cmd and is undone exactly,
``doctor --prefix`` reports the DLL copies wine's real loader picked next to its prediction,
and piped output in the Western code page does not fail a render."""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from shells import winhost, winpython
from shells.harness import Snap, Source, Step
from shells.wine import WinePrefix, run_cmd_sessions, win_path

from envfactory.activation.plan import script_relpath

pytestmark = [
    pytest.mark.wine,
    pytest.mark.network,
    pytest.mark.skipif(shutil.which("wine") is None, reason="wine is not installed"),
]

HOME = "C:\\Users\\张三"
ENV = HOME + "\\envs\\tf 114"
LOCKS = HOME + "\\locks"
RENDERED = HOME + "\\out dir"
COMBO = "tf114-cuda100"
ENVFACTORY = str(Path(sys.executable).parent / "envfactory")


@pytest.fixture(scope="module")
def host(
    request: pytest.FixtureRequest, wine: WinePrefix, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    cache = request.config.cache
    folder = Path(cache.mkdir("windows-host")) if cache else tmp_path_factory.mktemp("winhost")
    try:
        python = winhost.prepare(folder)
    except winhost.SetupFailed as err:
        pytest.fail(
            f"error: {err}\nhint: the Windows-host tests need pypi.org once (kept in {folder})",
            pytrace=False,
        )
    winhost.add_process_prng(wine)
    return python


def channel_args(channels: dict[str, Path]) -> list[str]:
    return [
        "--channel-map", f"defaults={win_path(channels['defaults'])}",
        "--channel-map", f"conda-forge={win_path(channels['conda-forge'])}",
        "--pip-index", win_path(channels["wheels"]),
    ]  # fmt: skip


JOBS = [
    "list", "show", "render", "lock", "create", "verify", "audit", "explain", "compat-411",
    "compat-211", "doctor", "kernel", "mirror", "cache",
]  # fmt: skip


@pytest.fixture(scope="module")
def batch(
    host: Path,
    wine: WinePrefix,
    test_channels: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, winhost.Outcome]:
    corpus = (
        Path(__file__).parent / "data" / "explain-corpus" / "dll-load-failed--tensorflow-38163.txt"
    )
    lock = LOCKS + f"\\{COMBO}\\conda-lock.yml"
    jobs = {
        "list": winhost.Job(["list"]),
        "show": winhost.Job(["show", COMBO]),
        "render": winhost.Job(["render", COMBO, "-p", "win-64", "-o", RENDERED]),
        "lock": winhost.Job(
            ["lock", COMBO, "-p", "win-64", *channel_args(test_channels), "-o", LOCKS]
        ),
        "create": winhost.Job(["create", lock, "-p", ENV, *channel_args(test_channels)]),
        "verify": winhost.Job(["verify", ENV]),
        "audit": winhost.Job(["audit", lock, "--json"]),
        "explain": winhost.Job(["explain", win_path(corpus)]),
        "compat-411": winhost.Job(["compat", COMBO, "--driver", "411.00", "--cc", "7.5", "--json"]),
        "compat-211": winhost.Job(["compat", "tf211-cuda112", "--cc", "7.5"]),
        "doctor": winhost.Job(["doctor", COMBO, "--json"], cwd=HOME),
        "kernel": winhost.Job(["kernel", ENV, "--target", "env", "--json"]),
        "mirror": winhost.Job(["mirror", lock, HOME + "\\mirror", "--json"]),
        "cache": winhost.Job(["cache", "info"]),
    }
    assert list(jobs) == JOBS
    env = {"ENVFACTORY_PKGS_DIRS": "C:\\envfactory-pkgs", "ENVFACTORY_TRACEBACK": "1"}
    outcomes = winhost.run_batch(
        wine, host, list(jobs.values()), tmp_path_factory.mktemp("winbatch"), env
    )
    return dict(zip(jobs, outcomes, strict=True))


def ok(outcome: winhost.Outcome, code: int = 0) -> winhost.Outcome:
    assert outcome.code == code, f"exit {outcome.code}\n{outcome.stdout}\n{outcome.stderr}"
    return outcome


def test_catalog_commands(batch: dict[str, winhost.Outcome]) -> None:
    assert "tf114-cuda100" in ok(batch["list"]).stdout
    assert "tf-tested-windows" in ok(batch["show"]).stdout


def test_render_is_byte_identical_to_linux(
    batch: dict[str, winhost.Outcome], wine: WinePrefix, tmp_path: Path
) -> None:
    ok(batch["render"])
    linux = subprocess.run(
        [ENVFACTORY, "render", COMBO, "-p", "win-64", "-o", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert linux.returncode == 0
    windows = winhost.drive_c(wine, RENDERED) / COMBO
    compared = filecmp.dircmp(windows, tmp_path / COMBO)
    files = _same_tree(windows, tmp_path / COMBO)
    assert files >= 10 and not compared.left_only and not compared.right_only


def _same_tree(left: Path, right: Path) -> int:
    names = sorted(p.relative_to(left) for p in left.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(right) for p in right.rglob("*") if p.is_file())
    for name in names:
        assert (left / name).read_bytes() == (right / name).read_bytes(), name
    return len(names)


def test_lock_create_verify_on_windows(batch: dict[str, winhost.Outcome], wine: WinePrefix) -> None:
    assert "win-64: 6 conda + 23 pip packages" in ok(batch["lock"]).stdout
    ok(batch["create"])
    assert "is identical to" in ok(batch["verify"]).stdout
    prefix = winhost.drive_c(wine, ENV)
    assert {p.name for p in (prefix / "conda-meta").glob("*.json")} >= {
        "python-3.7.3-h8c8aaf0_1.json",
        "cudatoolkit-10.0.130-0.json",
        "cudnn-7.6.5-cuda10.0_0.json",
    }
    assert (prefix / script_relpath(COMBO, "activate", "bat")).is_file()
    assert (prefix / "Lib" / "site-packages").is_dir()


def test_audit_explain_compat_answer_for_windows(batch: dict[str, winhost.Outcome]) -> None:
    [report] = json.loads(ok(batch["audit"]).stdout)["environments"]
    assert report["platform"] == "win-64"
    assert "cuda-mismatch" not in {f["id"] for f in report["findings"]}
    assert "[dll-load-failed]" in ok(batch["explain"], 3).stdout
    compat = json.loads(ok(batch["compat-411"], 3).stdout)
    assert (compat["platform"], compat["verdict"]) == ("win-64", "driver-too-old")
    assert "WSL2" in ok(batch["compat-211"], 3).stdout


def test_doctor_kernel_mirror_cache_run(batch: dict[str, winhost.Outcome]) -> None:
    report = json.loads(ok(batch["doctor"], 3).stdout)
    assert report["platform"] == "win-64"
    assert report["windows"]["python"] == "3.7" and report["windows"]["cwd"] == HOME
    assert [d["dll"] for d in report["windows"]["dlls"]] == [
        "cudart64_100.dll", "cublas64_100.dll", "cudnn64_7.dll", "msvcp140.dll", "msvcp140_1.dll"
    ]  # fmt: skip
    kernel = json.loads(ok(batch["kernel"]).stdout)
    assert "PATH" in json.dumps(kernel)
    ok(batch["mirror"])
    assert "package cache C:\\envfactory-pkgs" in ok(batch["cache"]).stdout


def test_created_environment_cmd_activation_round_trip_is_exact(
    batch: dict[str, winhost.Outcome], wine: WinePrefix, windows_python: Path, tmp_path: Path
) -> None:
    """The stubs run the environment's own python.exe: the stub package's placeholder is
    replaced by a real Windows CPython 3.8 (after verify, which it would fail)."""
    ok(batch["create"])
    prefix = winhost.drive_c(wine, ENV)
    winpython.install(windows_python, prefix)
    # the driver .bat names the scripts it CALLs literally, and cmd reads a .bat in the OEM
    # code page: it reaches the environment's scripts through an ASCII-named link; the
    # environment itself (CONDA_PREFIX) keeps its C:\Users\张三\envs\tf 114 path
    link = tmp_path / "env-link"
    link.symlink_to(prefix)
    activate = link / script_relpath(COMBO, "activate", "bat")
    deactivate = link / script_relpath(COMBO, "deactivate", "bat")
    start = {
        "CONDA_PREFIX": ENV,
        "CONDA_SHLVL": "1",
        "PATH": ";".join(
            [
                "C:\\windows\\system32",
                "D:\\CUDA\\v10.0\\bin",
                "C:\\tools\\cuda\\bin",
                HOME + "\\bin",
            ]
        ),
        "CUDA_PATH": "D:\\CUDA\\v10.0",
    }
    steps: list[Step] = [Snap(), Source(activate), Snap(), Source(deactivate), Snap()]
    (result,), stderr = run_cmd_sessions(wine, [(steps, start)], tmp_path / "cmd")
    before, active, after = result.snaps
    assert result.codes == [0, 0], (result.errors, stderr)
    assert after == before
    path = active["PATH"].split(";")
    assert path[0] == ENV + "\\Library\\bin"
    assert "D:\\CUDA\\v10.0\\bin" not in path and "C:\\tools\\cuda\\bin" not in path
    assert "C:\\Users\\张三\\bin" in path


def test_doctor_measures_what_wines_loader_loads(
    host: Path, wine: WinePrefix, tmp_path: Path
) -> None:
    """An environment with a real python.exe (the Windows CPython 3.11, not conda's build):
    doctor predicts each DLL and the environment's Python loads it; wine's loader is the
    judge. cudart64_100.dll only on PATH: Python 3.11's ctypes does not search PATH, so it is
    not found, predicted and measured; cudnn64_7.dll on PATH and in python.exe's folder:
    the application folder's."""
    prefix = winhost.drive_c(wine, HOME + "\\envs\\probe")
    tools = winhost.drive_c(wine, "C:\\tools\\cuda\\bin")
    for folder in (prefix, tools, prefix / "Lib" / "site-packages" / "tensorflow" / "python"):
        folder.mkdir(parents=True, exist_ok=True)
    for source in host.iterdir():  # the 3.11 files, python311.dll among them
        if source.is_file():
            shutil.copyfile(source, prefix / source.name)
    stand_in = host / "vcruntime140_1.dll"  # any loadable x64 DLL under another name
    for target in (
        tools / "cudart64_100.dll",
        tools / "cudnn64_7.dll",
        prefix / "cudnn64_7.dll",
        prefix / "Lib" / "site-packages" / "tensorflow" / "python" / "cublas64_100.dll",
    ):
        shutil.copyfile(stand_in, target)
    path = f"C:\\tools\\cuda\\bin;{ENV}\\Library\\bin;C:\\windows\\system32"
    job = winhost.Job(
        ["doctor", COMBO, "--prefix", HOME + "\\envs\\probe", "--json"],
        env={"PATH": path},
        cwd=HOME,
    )
    (outcome,) = winhost.run_batch(wine, host, [job], tmp_path, {})
    report = json.loads(outcome.stdout or "null") or pytest.fail(outcome.stderr)
    predicted = {d["dll"]: d["loads"] for d in report["windows"]["dlls"]}
    measured = report["measured"]
    assert report["windows"]["python"] == "3.11" and report["windows"]["conda_python"] is False
    assert predicted["cudart64_100.dll"] is None and measured["cudart64_100.dll"]["path"] is None
    assert predicted["cudnn64_7.dll"]["origin"] == "application"
    assert measured["cudnn64_7.dll"]["path"].lower() == predicted["cudnn64_7.dll"]["path"].lower()
    assert (
        measured["cublas64_100.dll"]["path"]
        .lower()
        .endswith("\\lib\\site-packages\\tensorflow\\python\\cublas64_100.dll")
    )
    differ = [f for f in report["findings"] if f["id"] == "measured-load-differs"]
    assert not [f for f in differ if "cud" in f["message"]], differ


def test_render_with_piped_output_in_a_western_code_page(host: Path, wine: WinePrefix) -> None:
    done = winhost.run_cli(
        wine, host, ["render", COMBO, "-p", "win-64", "-o", HOME + "\\piped"], {}
    )
    assert done.returncode == 0, done.stderr.decode("cp1252", "replace")
    assert b"UTF-8" not in done.stderr
    assert (winhost.drive_c(wine, HOME + "\\piped") / COMBO / "environment.win-64.yml").is_file()


def test_the_wheels_exe_launcher_runs_envfactory(
    host: Path, wine: WinePrefix, tmp_path: Path
) -> None:
    """What a Windows user gets from ``pip install envfactory``: the wheel built from this
    checkout, installed with ``installer`` in the nt scheme, gives ``Scripts\\envfactory.exe``
    (installer's console launcher); it runs envfactory from the wheel alone (the checkout is
    not on that Python's path), templates included: ``list`` and ``render`` work."""
    wheel = winhost.build_wheel(tmp_path / "dist")
    home_win = "C:\\envfactory-release"
    exe = winhost.install_as_release(host, winhost.drive_c(wine, home_win), home_win, wheel)
    assert exe.read_bytes()[:2] == b"MZ"  # a Windows program, not a script

    def launch(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["wine", str(exe), *argv],
            env=wine.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            encoding="utf-8", errors="replace", timeout=300, check=False,
        )  # fmt: skip

    listed = launch("list")
    assert listed.returncode == 0, listed.stderr
    assert "tf114-cuda100" in listed.stdout
    rendered = launch("render", COMBO, "-p", "win-64", "-o", "C:\\release-out")
    assert rendered.returncode == 0, rendered.stderr
    out = winhost.drive_c(wine, "C:\\release-out") / COMBO
    assert (out / "environment.win-64.yml").is_file()
    site = winhost.drive_c(wine, home_win + "\\Lib\\site-packages")
    assert (site / "envfactory" / "templates").is_dir()
    assert not (site / "envfactory" / "__init__.py").is_symlink()


LONG_PATHS = "HKLM\\SYSTEM\\CurrentControlSet\\Control\\FileSystem"


def _reg(wine: WinePrefix, *args: str) -> None:
    done = subprocess.run(
        ["wine", "reg", *args], env=wine.env, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")


def test_create_checks_long_paths_before_linking(
    batch: dict[str, winhost.Outcome],
    host: Path,
    wine: WinePrefix,
    test_channels: dict[str, Path],
    tmp_path: Path,
) -> None:
    """A prefix whose files would pass 259 characters: with LongPathsEnabled off (0, as on a
    fresh Windows) create stops before linking, names the fix and leaves nothing behind;
    doctor says the setting is off. With the value set to 1 (``reg add``) the same create
    goes through and doctor says it is on."""
    ok(batch["create"])  # the lock is in place and its packages are in the cache
    lock = LOCKS + f"\\{COMBO}\\conda-lock.yml"
    parent = HOME + "\\envs"
    long_prefix = parent + "\\" + ("long-prefix-" + "p" * 250)[: 215 - len(parent)]
    assert len(long_prefix) == 216
    jobs = [
        winhost.Job(["create", lock, "-p", long_prefix, *channel_args(test_channels)]),
        winhost.Job(["doctor", COMBO, "--json"], cwd=HOME),
    ]
    env = {"ENVFACTORY_PKGS_DIRS": "C:\\envfactory-pkgs"}
    _reg(wine, "add", LONG_PATHS, "/v", "LongPathsEnabled", "/t", "REG_DWORD", "/d", "0", "/f")
    refused, doctor_off = winhost.run_batch(wine, host, jobs, tmp_path / "off", env)
    assert refused.code == 1, refused.stderr
    assert "over Windows' limit of 259" in refused.stderr
    assert "LongPathsEnabled" in refused.stderr and "maximum-file-path-limitation" in refused.stderr
    left = [p.name for p in winhost.drive_c(wine, parent).iterdir() if "long-prefix" in p.name]
    assert left == []  # neither the prefix nor its staging folder
    assert json.loads(doctor_off.stdout)["windows"]["long_paths_enabled"] is False
    _reg(wine, "add", LONG_PATHS, "/v", "LongPathsEnabled", "/t", "REG_DWORD", "/d", "1", "/f")
    try:
        created, doctor_on = winhost.run_batch(wine, host, jobs, tmp_path / "on", env)
    finally:
        _reg(wine, "delete", LONG_PATHS, "/v", "LongPathsEnabled", "/f")
    assert created.code == 0, created.stderr
    assert (winhost.drive_c(wine, long_prefix) / "conda-meta").is_dir()
    assert json.loads(doctor_on.stdout)["windows"]["long_paths_enabled"] is True
