"""conda's flags do what conda's do: -n/-p, --platform/--subdir, -f/--file, --dry-run, -y,
envs dirs as conda and micromamba resolve them, environments.txt; the old -p (platform) still
works and says it is deprecated.

What conda does, for the expectations (not the code under test): envs dirs are the configured
``envs_dirs`` (CONDA_ENVS_DIRS or .condarc) then ``~/.conda/envs`` (conda/base/context.py,
``Context.envs_dirs``); created environments are appended to ``~/.conda/environments.txt``
(conda/core/envs_manager.py, ``register_env``), which ``conda env list`` reads.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from crafted import Crafted, crafted_lock

from envfactory.project.envdirs import envs_dirs, existing_prefix, new_prefix, register

ENVFACTORY = str(Path(sys.executable).with_name("envfactory"))


# --- envs dirs ------------------------------------------------------------------------------


def test_envs_dirs_in_conda_order(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".conda").mkdir(parents=True)
    (home / ".condarc").write_text("channels: [conda-forge]\nenvs_dirs:\n  - ~/rc-envs\n")
    env = {"HOME": str(home), "MAMBA_ROOT_PREFIX": str(tmp_path / "mamba")}
    assert envs_dirs(env) == [home / "rc-envs", tmp_path / "mamba" / "envs", home / ".conda/envs"]
    # the variable wins over the files (conda: env vars over .condarc)
    env["CONDA_ENVS_DIRS"] = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    assert envs_dirs(env)[:2] == [tmp_path / "a", tmp_path / "b"]
    assert home / "rc-envs" not in envs_dirs(env)
    # $CONDARC is read too, and XDG's conda/.condarc
    bare = {"HOME": str(tmp_path / "nohome"), "CONDARC": str(tmp_path / "my.condarc")}
    (tmp_path / "my.condarc").write_text(f"envs_dirs: [{tmp_path / 'x'}]\n")
    assert envs_dirs(bare) == [tmp_path / "x", tmp_path / "nohome" / ".conda" / "envs"]


def test_a_new_name_goes_to_the_first_writable_dir(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        env = {"HOME": str(tmp_path), "CONDA_ENVS_DIRS": f"{locked / 'envs'},{tmp_path / 'ok'}"}
        if os.access(locked, os.W_OK):  # root writes anywhere
            assert new_prefix("tf1", env) == locked / "envs" / "tf1"
        else:
            assert new_prefix("tf1", env) == tmp_path / "ok" / "tf1"
    finally:
        locked.chmod(0o700)


def test_an_existing_name_is_found_where_it_is(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "CONDA_ENVS_DIRS": f"{tmp_path / 'a'},{tmp_path / 'b'}"}
    (tmp_path / "b" / "tf1").mkdir(parents=True)
    assert existing_prefix("tf1", env) == tmp_path / "b" / "tf1"
    with pytest.raises(Exception, match="no environment named 'tf2'") as info:
        existing_prefix("tf2", env)
    assert str(tmp_path / "a") in str(info.value)


def test_register_appends_once_and_respects_conda_register_envs(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    prefix = tmp_path / "envs" / "x"
    prefix.mkdir(parents=True)
    listing = tmp_path / ".conda" / "environments.txt"
    listing.parent.mkdir()
    listing.write_text("/opt/conda\n")
    assert register(prefix, env) == listing
    assert register(prefix, env) == listing
    assert listing.read_text() == f"/opt/conda\n{prefix}\n"
    assert register(tmp_path, {**env, "CONDA_REGISTER_ENVS": "false"}) is None
    assert str(tmp_path) + "\n" not in listing.read_text()


# --- the commands ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_lock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("conventions")
    return crafted_lock(root, [Crafted("alpha"), Crafted("beta")])


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVFACTORY, *args], env={**os.environ, **(env or {})}, cwd=cwd,
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_create_n_verify_n_doctor_n_and_conda_env_list(small_lock: Path, tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path / "home"),
        "CONDA_ENVS_DIRS": str(tmp_path / "envs"),
        "CONDA_REGISTER_ENVS": "true",
    }
    made = cli("create", "-f", str(small_lock), "-n", "demo", "--subdir", "linux-64", env=env)
    assert made.returncode == 0, made.stderr
    prefix = tmp_path / "envs" / "demo"
    assert (prefix / "conda-meta" / "envfactory.json").is_file()
    listing = tmp_path / "home" / ".conda" / "environments.txt"
    assert listing.read_text().splitlines() == [str(prefix)]
    checked = cli("verify", "-n", "demo", "--json", env=env)
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["prefix"] == str(prefix)
    assert cli("verify", "-p", str(prefix), env=env).returncode == 0
    assert cli("verify", str(prefix), env=env).returncode == 0  # the old spelling
    both = cli("verify", "-n", "demo", "-p", str(prefix), env=env)
    assert both.returncode == 1 and "give one environment" in both.stderr
    doctor = cli("doctor", "-n", "demo", "--subdir", "linux-64", "--json", env=env)
    assert doctor.returncode in (0, 3), doctor.stderr
    assert json.loads(doctor.stdout)["prefix"] == str(prefix)
    missing = cli("verify", "-n", "nothere", env=env)
    assert missing.returncode == 1 and "no environment named 'nothere'" in missing.stderr


def test_create_dry_run_writes_nothing(small_lock: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    proc = cli(
        "create", "-f", str(small_lock), "-p", str(tmp_path / "env"), "--platform", "linux-64",
        "--dry-run", env={"ENVFACTORY_PKGS_DIRS": str(cache)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"dry run: would create {tmp_path / 'env'}: 2 conda + 0 pip packages (linux-64) from "
        f"{small_lock}; nothing was written\n"
    )
    assert not (tmp_path / "env").exists() and not cache.exists()
    # and it refuses what create would refuse
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    refused = cli("create", "-f", str(small_lock), "-p", str(tmp_path / "full"), "-d",
                  "--platform", "linux-64")  # fmt: skip
    assert refused.returncode == 1 and "exists and is not empty" in refused.stderr


def test_create_wants_a_name_or_a_file(small_lock: Path) -> None:
    both = cli("create", "tf114-cuda100", "-f", str(small_lock), "-p", "x")
    assert both.returncode == 1 and "a NAME or -f LOCKFILE" in both.stderr
    neither = cli("create", "-p", "x")
    assert neither.returncode == 1 and "a NAME or -f LOCKFILE" in neither.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["render", "tf114-cuda100", "-o", "-"],
        ["mirror", "nothing-here", "/nonexistent"],
    ],
)
def test_p_as_platform_still_works_with_a_note(args: list[str], tmp_path: Path) -> None:
    old = cli(*args, "-p", "linux-64", cwd=tmp_path)
    new = cli(*args, "--platform", "linux-64", cwd=tmp_path)
    subdir = cli(*args, "--subdir", "linux-64", cwd=tmp_path)
    note = "note: -p as the platform is deprecated and will go away: write --platform linux-64"
    assert note in old.stderr
    assert note not in new.stderr and note not in subdir.stderr
    assert old.returncode == new.returncode == subdir.returncode
    assert old.stdout == new.stdout == subdir.stdout
    assert old.stderr.replace(note + " (or --subdir); as in conda, -p is the prefix\n", "") == (
        new.stderr
    )


def test_lock_takes_the_project_file_as_f(tmp_path: Path) -> None:
    proc = cli("lock", "--check", "-f", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert proc.returncode == 1
    assert "nope.yaml" in proc.stderr


# --- cache clean asks first -----------------------------------------------------------------


def _clean_on_a_terminal(cache: Path, answer: bytes) -> tuple[int, str]:
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [ENVFACTORY, "cache", "clean"], stdin=child, stdout=subprocess.PIPE, stderr=child,
        env={**os.environ, "ENVFACTORY_PKGS_DIRS": str(cache)},
    )  # fmt: skip
    os.close(child)
    os.write(main, answer)
    out, _ = proc.communicate(timeout=60)
    seen = b""
    try:
        while chunk := os.read(main, 4096):
            seen += chunk
    except OSError:
        pass
    os.close(main)
    assert b"Proceed ([y]/n)? " in seen, seen
    return proc.returncode, out.decode()


def test_cache_clean_asks_and_y_skips(small_lock: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    made = cli("create", "-f", str(small_lock), "-p", str(tmp_path / "env"), "--platform",
               "linux-64", env={"ENVFACTORY_PKGS_DIRS": str(cache)})  # fmt: skip
    assert made.returncode == 0, made.stderr
    entries = sorted(p.name for p in cache.iterdir())
    code, _out = _clean_on_a_terminal(cache, b"n\n")
    assert code == 1 and sorted(p.name for p in cache.iterdir()) == entries
    dry = cli("cache", "clean", "--dry-run", env={"ENVFACTORY_PKGS_DIRS": str(cache)})
    assert dry.returncode == 0 and dry.stdout.startswith("dry run: would remove 2 extracted")
    assert sorted(p.name for p in cache.iterdir()) == entries
    code, out = _clean_on_a_terminal(cache, b"y\n")
    assert code == 0 and out.startswith("removed ")
    assert not [p for p in cache.iterdir() if p.name.startswith(("alpha", "beta"))]
