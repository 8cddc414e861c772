"""Locks that live in a repository: a re-lock keeps what it can (conda and pip), ``lock --update
PKG`` moves one closure, ``envfactory diff`` shows the change per platform, from files or git
revisions.

The channel is real (stub archives, ``rattler.index``) and *moves on* between two locks: newer
versions of packages the project already has appear, as they do on a live channel a month later.
The solver and uv are the real ones; the git repository is a real one in ``tmp_path``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from channel_builder import (
    PLACEHOLDER,
    PY37,
    StubPackage,
    build_channel,
    defaults_packages,
    defaults_project_packages,
    write_wheel,
)

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
SUBDIR = "linux-64"


def run(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVFACTORY, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.org",
            "HOME": str(cwd),
            "PATH": "/usr/bin:/bin",
        },
        check=True,
    )
    return proc.stdout


def pkg(name: str, version: str, *depends: str, build: str = "py37_0") -> StubPackage:
    # a script with conda's prefix placeholder: linking writes a new copy of it, with the
    # prefix in it, where a package's other files are hard links to the cache
    files = {
        f"share/envf-stub/{name}.txt": f"{name} {version}\n",
        f"bin/{name}": f"#!{PLACEHOLDER}/bin/python\n# {name} {version}\n",
    }
    return StubPackage(name, version, build, SUBDIR, depends=(PY37, *depends), files=files)


# What the project adds to tf114-cuda101 at first: requests (with urllib3, idna) and tqdm.
FIRST = [
    pkg("requests", "2.22.0", "urllib3 >=1.21.1,<1.26", "idna >=2.5,<2.9"),
    pkg("urllib3", "1.25.3"),
    pkg("idna", "2.8"),
    pkg("tqdm", "4.32.1"),
]
# A month later the channel holds newer versions of all of them (requests 2.23 needs a newer
# urllib3 and idna), and newer versions of what pandas needs.
LATER = [
    pkg("requests", "2.23.0", "urllib3 >=1.25.8,<1.26", "idna >=2.5,<3"),
    pkg("urllib3", "1.25.8"),
    pkg("idna", "2.9"),
    pkg("tqdm", "4.40.0"),
    pkg("python-dateutil", "2.8.1", "six >=1.5"),
    pkg("six", "1.13.0"),
]

MANIFEST = """environments:
  app:
    combo: tf114-cuda101
    platforms: [linux-64]
    add: [requests, tqdm]
    pip: [tabulate]
"""


def wheels(folder: Path, later: bool) -> None:
    write_wheel(folder, "tabulate", "0.8.6", "tabulate-0.8.6-py3-none-any.whl", ["wcwidth"], None)
    write_wheel(folder, "wcwidth", "0.1.7", "wcwidth-0.1.7-py2.py3-none-any.whl", [], None)
    if later:
        write_wheel(
            folder, "tabulate", "0.8.7", "tabulate-0.8.7-py3-none-any.whl", ["wcwidth"], None
        )
        write_wheel(folder, "wcwidth", "0.1.8", "wcwidth-0.1.8-py2.py3-none-any.whl", [], None)


def move_channel(project: Path) -> None:
    build_channel(project.parent / "defaults", LATER)
    wheels(project.parent / "wheels", later=True)


def flags(project: Path) -> list[str]:
    return ["--channel-map", f"defaults={project.parent / 'defaults'}",
            "--pip-index", str(project.parent / "wheels")]  # fmt: skip


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project locked against the first channel, committed; then the channel moves on."""
    root = tmp_path_factory.mktemp("relock")
    build_channel(root / "defaults", defaults_packages() + defaults_project_packages() + FIRST)
    wheels(root / "wheels", later=False)
    project = root / "project"
    project.mkdir()
    (project / "envfactory.yaml").write_text(MANIFEST, encoding="utf-8")
    proc = run("lock", *flags(project), cwd=project)
    assert proc.returncode == 0, proc.stderr
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "first lock")
    move_channel(project)
    return project


@pytest.fixture
def project(locked: Path, tmp_path: Path) -> Iterator[Path]:
    """A fresh copy of the committed project (with its git repository) for one test, beside
    the channels (the lock records their paths)."""
    copy = locked.parent / tmp_path.name
    shutil.copytree(locked, copy)
    yield copy
    shutil.rmtree(copy)


def diff_json(project: Path, *args: str) -> dict[str, Any]:
    proc = run("diff", "--json", *args, cwd=project)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def changes(report: dict[str, Any]) -> dict[str, tuple[str, str | None, str | None]]:
    """name -> (kind, old version, new version) on linux-64."""
    out = {}
    for c in report["platforms"][SUBDIR]["changes"]:
        old = c["old"]["version"] if c["old"] else None
        new = c["new"]["version"] if c["new"] else None
        out[c["name"]] = (c["kind"], old, new)
    return out


def test_same_inputs_on_a_moved_channel_give_the_same_bytes(project: Path) -> None:
    before = {p: p.read_bytes() for p in sorted((project / "locks").rglob("*")) if p.is_file()}
    proc = run("lock", *flags(project), cwd=project)
    assert proc.returncode == 0, proc.stderr
    after = {p: p.read_bytes() for p in sorted((project / "locks").rglob("*")) if p.is_file()}
    assert after == before
    assert "linux-64: no changes" in proc.stdout
    assert git(project, "status", "--porcelain") == ""


def test_update_all_moves_everything_the_channel_moved(project: Path) -> None:
    """The control: solved from scratch, the same inputs pick up every newer version, conda and
    pip (so the sticky tests above and below could fail)."""
    proc = run("lock", "--update-all", *flags(project), cwd=project)
    assert proc.returncode == 0, proc.stderr
    moved = changes(diff_json(project))
    assert moved == {
        "idna": ("changed", "2.8", "2.9"),
        "requests": ("changed", "2.22.0", "2.23.0"),
        "tqdm": ("changed", "4.32.1", "4.40.0"),
        "urllib3": ("changed", "1.25.3", "1.25.8"),
        "tabulate": ("changed", "0.8.6", "0.8.7"),
        "wcwidth": ("changed", "0.1.7", "0.1.8"),
    }


def test_adding_a_package_changes_only_it_and_what_it_needs(project: Path) -> None:
    manifest = project / "envfactory.yaml"
    manifest.write_text(MANIFEST.replace("[requests, tqdm]", "[requests, tqdm, pandas]"))
    proc = run("lock", *flags(project), cwd=project)
    assert proc.returncode == 0, proc.stderr
    # pandas 0.24.2 (the newer decoy needs numpy 1.17) and its new dependencies, at their
    # newest; requests, urllib3, idna, tqdm and the pip side keep their locked versions
    expected = {
        "pandas": ("added", None, "0.24.2"),
        "python-dateutil": ("added", None, "2.8.1"),
        "pytz": ("added", None, "2019.1"),
        "six": ("added", None, "1.13.0"),
    }
    assert changes(diff_json(project)) == expected
    # lock printed the same change
    assert "linux-64: 4 added, 0 removed, 0 changed" in proc.stdout
    assert "  + pandas 0.24.2 py37he6710b0_0 (" in proc.stdout
    # and the text diff marks what the inputs ask for
    text = run("diff", cwd=project)
    assert text.returncode == 0, text.stderr
    # the lock is named by its path in the project, the same on every machine
    assert text.stdout.startswith("HEAD:locks/app/conda-lock.yml -> locks/app/conda-lock.yml\n")
    assert "  + pandas 0.24.2 py37he6710b0_0 (file://" in text.stdout
    assert text.stdout.count("[requested]") == 1  # pandas; its dependencies are not named


def test_update_one_package_moves_only_its_closure(project: Path) -> None:
    dry = run("lock", "--update", "requests", "--dry-run", *flags(project), cwd=project)
    assert dry.returncode == 0, dry.stderr
    assert "  ~ requests 2.22.0 py37_0 -> 2.23.0 py37_0 [requested]" in dry.stdout
    assert "  ~ urllib3 1.25.3 py37_0 -> 1.25.8 py37_0" in dry.stdout
    assert "dry run: nothing written" in dry.stdout
    assert git(project, "status", "--porcelain") == ""  # nothing written

    proc = run("lock", "--update", "requests", *flags(project), cwd=project)
    assert proc.returncode == 0, proc.stderr
    # requests 2.23 needs urllib3 >= 1.25.8: dragged along; idna 2.8 still fits: kept
    assert changes(diff_json(project)) == {
        "requests": ("changed", "2.22.0", "2.23.0"),
        "urllib3": ("changed", "1.25.3", "1.25.8"),
    }


def test_update_a_pip_package(project: Path) -> None:
    proc = run("lock", "-u", "tabulate", *flags(project), cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert changes(diff_json(project)) == {"tabulate": ("changed", "0.8.6", "0.8.7")}


def test_update_a_name_the_lock_does_not_hold(project: Path) -> None:
    proc = run("lock", "--update", "reqests", *flags(project), cwd=project)
    assert proc.returncode == 1
    assert "error: --update reqests: not in" in proc.stderr
    assert "hint: did you mean requests?" in proc.stderr


# --------------------------------------------------------------------------------------------
# lock --check on a stale lock: what a re-lock would change, as lock prints it.


def change_lines(stdout: str) -> list[str]:
    """The change summary in a command's output: each platform's count line and one line per
    package (``lock`` prints them after the solve, ``lock --check`` under its reasons)."""
    summary = re.compile(r"(app )?linux-64: (\d+ added|no changes)")
    return [
        line
        for line in stdout.splitlines()
        if summary.match(line) or line.startswith(("  + ", "  - ", "  ~ "))
    ]


def test_check_prints_what_the_relock_then_changes(project: Path) -> None:
    manifest = project / "envfactory.yaml"
    manifest.write_text(MANIFEST.replace("[requests, tqdm]", "[requests, tqdm, pandas]"))
    check = run("lock", "--check", *flags(project), cwd=project)
    assert check.returncode == 1, check.stdout + check.stderr
    lines = check.stdout.splitlines()
    assert lines[0].endswith("locks/app/conda-lock.yml is stale: app (project environment, "
                             "combo tf114-cuda101)")  # fmt: skip
    assert lines[1:4] == [
        "  linux-64: conda changed: +pandas",
        "a re-lock would change:",
        "app linux-64: 4 added, 0 removed, 0 changed, 17 unchanged",
    ]
    assert lines[-1].startswith("regenerate: envfactory lock app --channel-map defaults=")
    assert git(project, "status", "--porcelain") == " M envfactory.yaml\n"  # nothing written
    as_json = run("lock", "--check", "--json", *flags(project), cwd=project)
    assert as_json.returncode == 1
    view = json.loads(as_json.stdout)["environments"]["app"]
    assert (view["fresh"], view["changes_unavailable"]) == (False, None)

    dry = run("lock", "--dry-run", "--json", *flags(project), cwd=project)
    assert dry.returncode == 0, dry.stderr
    assert view["changes"] == json.loads(dry.stdout)["environments"]["app"]["changes"]
    relock = run("lock", *flags(project), cwd=project)
    assert relock.returncode == 0, relock.stderr
    # the very lines lock printed when it re-locked: pandas and its three new dependencies
    assert change_lines(check.stdout) == change_lines(relock.stdout)
    assert len(change_lines(relock.stdout)) == 5
    assert "  + pandas 0.24.2 py37he6710b0_0 (file://" in relock.stdout
    fresh = run("lock", "--check", *flags(project), cwd=project)
    assert fresh.returncode == 0, fresh.stdout
    assert "is up to date" in fresh.stdout and "re-lock" not in fresh.stdout


@pytest.fixture
def channel_gone(project: Path) -> Iterator[Path]:
    """The project's conda channel out of reach (moved away; put back after the test)."""
    channel = project.parent / "defaults"
    away = project.parent / "defaults.away"
    channel.rename(away)
    try:
        yield channel
    finally:
        away.rename(channel)


def test_check_without_the_channels_still_names_what_changed(
    project: Path, channel_gone: Path
) -> None:
    # an up-to-date lock is not solved: no channel needed
    fresh = run("lock", "--check", *flags(project), cwd=project)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    manifest = project / "envfactory.yaml"
    manifest.write_text(MANIFEST.replace("[requests, tqdm]", "[requests, tqdm, pandas]"))
    check = run("lock", "--check", *flags(project), cwd=project)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "Traceback" not in check.stderr
    lines = check.stdout.splitlines()
    assert lines[1] == "  linux-64: conda changed: +pandas"
    unreachable = f"cannot read the channels {channel_gone.as_uri()}"
    assert lines[2].startswith(f"what a re-lock would change is not shown: {unreachable}")
    assert any(line.startswith("  hint: check the channel map") for line in lines)
    assert lines[-1].startswith("regenerate: envfactory lock app")
    as_json = run("lock", "--check", "--json", *flags(project), cwd=project)
    assert as_json.returncode == 1
    view = json.loads(as_json.stdout)["environments"]["app"]
    assert view["reasons"] == ["linux-64: conda changed: +pandas"]
    assert view["changes"] is None
    assert view["changes_unavailable"].startswith("cannot read the channels")


# --------------------------------------------------------------------------------------------
# --solver conda-lock cannot keep a lock: refused where it would have to.


def test_conda_lock_solver_refuses_a_sticky_relock(project: Path, tmp_path: Path) -> None:
    before = git(project, "status", "--porcelain")
    relock = run("lock", "--solver", "conda-lock", *flags(project), cwd=project)
    assert relock.returncode == 1, relock.stdout + relock.stderr
    assert "error: a re-lock of " in relock.stderr
    assert "with --solver conda-lock: conda-lock cannot keep the locked packages" in relock.stderr
    assert "hint: use the default solver (drop --solver conda-lock)" in relock.stderr
    assert "--update-all" in relock.stderr
    one = run("lock", "-u", "requests", "--solver", "conda-lock", *flags(project), cwd=project)
    assert one.returncode == 1
    assert "error: --update requests with --solver conda-lock:" in one.stderr
    assert git(project, "status", "--porcelain") == before  # nothing written
    # --update-all asks for a solve from scratch: conda-lock runs (and here finds no conda)
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    scratch = subprocess.run(
        [ENVFACTORY, "lock", "--solver", "conda-lock", "--update-all", *flags(project)],
        cwd=project, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert scratch.returncode == 2, scratch.stdout + scratch.stderr
    assert "--solver conda-lock needs conda, mamba or micromamba" in scratch.stderr
    # lock --check cannot show a conda-lock re-lock: it says why, and names the reasons
    check = run("lock", "--check", "--solver", "conda-lock", *flags(project), cwd=project)
    assert check.returncode == 1
    assert "  linux-64: solver changed:" in check.stdout
    assert (
        "what a re-lock would change is not shown: --solver conda-lock re-locks only from "
        "scratch (--update-all)" in check.stdout
    )
    # the command it names runs: with conda-lock, a re-lock is one from scratch
    regenerate = check.stdout.splitlines()[-1]
    assert regenerate.startswith("regenerate: envfactory lock app --solver conda-lock --channel")
    assert regenerate.endswith(" --update-all")


# --------------------------------------------------------------------------------------------
# envfactory diff: revisions, files, formats.


def test_diff_between_revisions_and_files(project: Path, tmp_path: Path) -> None:
    lock = project / "locks/app/conda-lock.yml"
    assert run("lock", "-u", "tqdm", *flags(project), cwd=project).returncode == 0
    git(project, "commit", "-q", "-am", "tqdm moved")
    # the working tree equals HEAD: nothing; HEAD~1 against HEAD: tqdm
    assert changes(diff_json(project)) == {}
    assert changes(diff_json(project, "HEAD~1", "HEAD")) == {
        "tqdm": ("changed", "4.32.1", "4.40.0")
    }
    assert changes(diff_json(project, "main~1")) == {"tqdm": ("changed", "4.32.1", "4.40.0")}
    # two files
    old = tmp_path / "old.yml"
    old.write_text(git(project, "show", "HEAD~1:locks/app/conda-lock.yml"))
    report = diff_json(project, str(old), str(lock))
    assert changes(report) == {"tqdm": ("changed", "4.32.1", "4.40.0")}
    # from another directory, naming the lock
    elsewhere = run("diff", "HEAD~1", "--lock", str(lock), "--json", cwd=tmp_path)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert changes(json.loads(elsewhere.stdout)) == {"tqdm": ("changed", "4.32.1", "4.40.0")}


def test_diff_markdown_for_a_pull_request(project: Path) -> None:
    assert run("lock", "-u", "requests", *flags(project), cwd=project).returncode == 0
    proc = run("diff", "--format", "markdown", cwd=project)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "#### `HEAD:locks/app/conda-lock.yml` → `locks/app/conda-lock.yml`"
    assert "**linux-64**: 0 added, 0 removed, 2 changed, 15 unchanged" in lines
    assert "| ~ | `requests` | 2.22.0 py37_0 | 2.23.0 py37_0 | requested |" in lines
    assert "| ~ | `urllib3` | 1.25.3 py37_0 | 1.25.8 py37_0 |  |" in lines


def test_diff_markdown_per_platform_marks_the_combos_pins(
    test_channels: dict[str, Path], tmp_path: Path
) -> None:
    """A pull request that moves an environment from tf114-cuda100 (linux-64, win-64; TF from
    pip) to tf114-cuda101 (linux-64; TF from conda): one table per platform, the packages the
    combo pins marked, what nothing names unmarked."""
    project = tmp_path / "pr"
    project.mkdir()
    manifest = project / "envfactory.yaml"
    env = "environments:\n  legacy:\n    combo: {}\n    platforms: [{}]\n"
    manifest.write_text(env.format("tf114-cuda100", "linux-64, win-64"))
    where = ["--channel-map", f"defaults={test_channels['defaults']}",
             "--pip-index", str(test_channels["wheels"])]  # fmt: skip
    assert run("lock", *where, cwd=project).returncode == 0
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "legacy on CUDA 10.0")
    manifest.write_text(env.format("tf114-cuda101", "linux-64"))
    assert run("lock", *where, cwd=project).returncode == 0

    proc = run("diff", "--format", "markdown", cwd=project)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "#### `HEAD:locks/legacy/conda-lock.yml` → `locks/legacy/conda-lock.yml`"
    linux = lines.index("**linux-64**: 4 added, 23 removed, 3 changed, 3 unchanged")
    windows = lines.index("**win-64**: 0 added, 29 removed, 0 changed, 0 unchanged")
    assert linux < windows
    header = ["", "| | package | old | new | |", "| --- | --- | --- | --- | --- |"]
    assert lines[linux + 1 : linux + 4] == header
    assert lines[windows + 1 : windows + 4] == header
    on_linux, on_windows = lines[linux:windows], lines[windows:]
    # the combo's pins, marked; the move from the pip wheel to the conda package is a change
    # of manager and channel
    assert "| ~ | `cudatoolkit` | 10.0.130 0 | 10.1.243 h6bb024c_0 | pinned |" in on_linux
    assert "| + | `tensorflow-base` |  | 1.14.0 gpu_py37he45bfe2_0 | pinned |" in on_linux
    (tf,) = [line for line in on_linux if line.startswith("| ~ | `tensorflow-gpu` |")]
    assert "| 1.14.0 (pip) file://" in tf and "| 1.14.0 h0d30ee6_0 (conda) file://" in tf
    assert tf.endswith(" | pinned |")
    # a pip dependency nothing names is not marked; the platform that goes loses everything
    assert "| - | `absl-py` | 2.1.0 (pip) |  |  |" in on_linux
    assert "| - | `python` | 3.7.3 h8c8aaf0_1 |  | pinned |" in on_windows
    assert not any("`python`" in line for line in on_linux)  # python 3.7.3 stays on linux-64


def test_diff_of_a_new_environment_and_bad_revisions(project: Path) -> None:
    manifest = project / "envfactory.yaml"
    manifest.write_text(
        MANIFEST + "  other:\n    combo: tf114-cuda101\n    platforms: [linux-64]\n"
    )
    assert run("lock", "other", *flags(project), cwd=project).returncode == 0
    report = diff_json(project, "--lock", "other")
    assert report["old"].endswith("(not in HEAD)")
    added = changes(report)
    assert added["tensorflow-gpu"] == ("added", None, "1.14.0") and len(added) == 10
    marks = {c["name"]: c["mark"] for c in report["platforms"][SUBDIR]["changes"]}
    assert marks["tensorflow-gpu"] == "pinned" and marks["python"] == "pinned"

    bad = run("diff", "no-such-rev", cwd=project)
    assert bad.returncode == 1
    assert "error: 'no-such-rev' is neither a lock file nor a git revision" in bad.stderr
    assert "hint:" in bad.stderr
    # a revision that is an option to git is never passed on as one
    assert run("diff", "--", "--output=/tmp/x", cwd=project).returncode == 1


def test_diff_outside_a_git_repository(tmp_path: Path, locked: Path) -> None:
    copy = tmp_path / "plain"
    shutil.copytree(locked, copy, ignore=shutil.ignore_patterns(".git"))
    proc = run("diff", "HEAD", cwd=copy)
    assert proc.returncode == 1
    assert "error: 'HEAD' is neither a lock file nor a git revision" in proc.stderr


# --------------------------------------------------------------------------------------------
# create --update: an environment brought to a newer lock in place.


def inode(path: Path) -> int:
    return path.stat().st_ino


@pytest.mark.slow
def test_update_an_environment_in_place(project: Path) -> None:
    created = run("create", "app", cwd=project)
    assert created.returncode == 0, created.stderr
    env = project / "envs/app"
    # tqdm stays: its script, written with the prefix by the first create, is the same file
    # after the update (linked again, it would be a new copy)
    kept_file = env / "bin/tqdm"
    assert str(env) in kept_file.read_text()
    before = inode(kept_file)
    manifest = project / "envfactory.yaml"
    manifest.write_text(MANIFEST.replace("[requests, tqdm]", "[requests, tqdm, pandas]"))
    assert (
        run("lock", "-u", "requests", "-u", "tabulate", *flags(project), cwd=project).returncode
        == 0
    )

    updated = run("create", "app", "--update", cwd=project)
    assert updated.returncode == 0, updated.stderr
    out = updated.stdout
    assert "  + pandas 0.24.2 py37he6710b0_0 (" in out
    assert "  ~ requests 2.22.0 py37_0 -> 2.23.0 py37_0" in out
    assert "  ~ tabulate 0.8.6 -> 0.8.7" in out
    # 15 conda packages stay, 4 come, 2 change: only those are linked
    assert (
        f"updated {env} (linux-64): 19 conda + 2 pip packages (13 conda packages kept, 6 linked)"
        in out
    )
    assert inode(kept_file) == before  # the kept package was not linked again
    assert "requests 2.23.0" in (env / "bin/requests").read_text()  # the changed one was
    verified = run("verify", str(env), cwd=project)
    assert verified.returncode == 0 and "is identical" in verified.stdout, verified.stdout
    # the activation files follow the lock: the same set a fresh create installs
    fresh = run("create", "app", "-p", str(project / "fresh"), cwd=project)
    assert fresh.returncode == 0, fresh.stderr
    activation = sorted(p.relative_to(env) for p in (env / "etc/conda").rglob("*") if p.is_file())
    assert activation == sorted(
        p.relative_to(project / "fresh")
        for p in (project / "fresh/etc/conda").rglob("*")
        if p.is_file()
    )
    assert activation  # there are some
    # nothing left beside the prefix
    assert sorted(p.name for p in (project / "envs").iterdir()) == ["app"]
    # up to date: a second update changes nothing
    again = run("create", "app", "--update", cwd=project)
    assert again.returncode == 0, again.stderr
    assert "linux-64: no changes (21 packages)" in again.stdout
    assert "(19 conda packages kept, 0 linked)" in again.stdout


def test_a_failed_update_leaves_the_old_environment_working(project: Path) -> None:
    assert run("create", "app", cwd=project).returncode == 0
    env = project / "envs/app"
    old_lock = project / "old-lock.yml"
    shutil.copyfile(project / "locks/app/conda-lock.yml", old_lock)
    assert run("lock", "-u", "requests", *flags(project), cwd=project).returncode == 0
    # a file of a package the update keeps was replaced in the environment (another inode,
    # other bytes): the new prefix is seeded with it, requests and urllib3 are linked, and the
    # post-link check refuses the result before anything is moved
    edited = env / "share/envf-stub/tqdm.txt"
    original = edited.read_bytes()
    edited.unlink()
    edited.write_bytes(b"edited by hand\n")
    snapshot = {p: p.read_bytes() for p in sorted(env.rglob("*")) if p.is_file()}
    failed = run("create", "app", "--update", cwd=project)
    assert failed.returncode == 2, failed.stdout + failed.stderr
    assert "13 conda packages kept" in failed.stderr  # the seeded path is the one that failed
    assert "error: tqdm 4.32.1 py37_0: share/envf-stub/tqdm.txt has 15 bytes" in failed.stderr
    assert f"hint: {env} is unchanged; a file of it was changed" in failed.stderr
    after = {p: p.read_bytes() for p in sorted(env.rglob("*")) if p.is_file()}
    assert after == snapshot  # the old environment, byte for byte
    assert sorted(p.name for p in (project / "envs").iterdir()) == ["app"]  # no staging left
    edited.unlink()
    edited.write_bytes(original)
    verified = run("verify", str(env), "--lock", str(old_lock), cwd=project)
    assert verified.returncode == 0 and "is identical" in verified.stdout, verified.stdout
    assert "requests 2.22.0" in (env / "bin/requests").read_text()


def test_update_needs_an_environment_envfactory_made(project: Path, tmp_path: Path) -> None:
    proc = run("create", "app", "--update", "-p", str(tmp_path / "nothing"), cwd=project)
    assert proc.returncode == 1
    assert "does not exist, so there is nothing to update" in proc.stderr
    assert "hint: create it" in proc.stderr
