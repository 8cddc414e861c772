"""What the author of a lock (a pull request) can no longer do (issue 28, items 2 and 7).

Each case starts from a real lock (py-rattler against the test channel, conda-lock's writer) and
makes the edit an attacker would make: append a package nothing requires, forge the whole set
consistently, record an activation plan that puts their program first on PATH, name ``Foo``
beside ``foo``, hide a file read behind a URL's query. Credentials given with ``--channel-map``
are served by a real HTTP server that wants them (a token in the path, or HTTP basic auth), and
must end up in no file of the lock set, no record of the environment and no message.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from envfactory.activation.plan import ActivationPlan, plan_for, recorded_plan_problem
from envfactory.catalog.loader import load_catalog
from envfactory.errors import UserInputError
from envfactory.lockfile.read import read_lock, toposort
from envfactory.lockfile.record import file_digest, package_block
from envfactory.solve.channels import ChannelMap
from envfactory.solve.lock import LockRequest, lock_combo
from envfactory.untrusted import redact, redact_url, safe_text, terminal_text, url_problem

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")
COMBO = "tf114-cuda100"


@pytest.fixture(scope="module")
def lock_dir(test_channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("author") / COMBO
    request = LockRequest.for_combo(
        load_catalog().combo(COMBO),
        platforms=("linux-64",),
        channel_map=ChannelMap({"defaults": test_channels["defaults"].as_uri()}),
        pip_index=str(test_channels["wheels"]),
    )
    lock_combo(request, directory)
    return directory


def envfactory(*args: str, cwd: Path, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVFACTORY, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        # a cache of its own: a package another test cached is not fetched again
        env=dict(os.environ, HOME=str(home or cwd), ENVFACTORY_PKGS_DIRS=str(cwd / "pkgs")),
        check=False,
    )


def copy_set(lock_dir: Path, root: Path) -> Path:
    """The lock set under ``root/locks/<combo>``; returns ``root``."""
    target = root / "locks" / COMBO
    shutil.copytree(lock_dir, target)
    return root


def check_args(test_channels: dict[str, Path]) -> list[str]:
    return [
        "lock", COMBO, "--check", "--platform", "linux-64",
        "--channel-map", f"defaults={test_channels['defaults']}",
        "--pip-index", str(test_channels["wheels"]),
    ]  # fmt: skip


def append_package(text: str, entry: str) -> str:
    assert text.endswith("\n")
    return text + entry


SDIST = """\
- name: evil
  version: 1.0.0
  manager: pip
  platform: linux-64
  dependencies: {}
  url: https://files.example.org/evil-1.0.0.tar.gz
  hash:
    sha256: 531cd7d6039e4ec31e8f9c573937f58050776b7d7b66c6efe9d1507f31a22b88
  category: main
  optional: false
"""


# --- item 2: an honest lock ---------------------------------------------------------------------


def test_create_refuses_an_appended_sdist_naming_it(lock_dir: Path, tmp_path: Path) -> None:
    """Before: the sdist was read as one of the lock's packages and create built it."""
    work = copy_set(lock_dir, tmp_path / "work")
    lock = work / "locks" / COMBO / "conda-lock.yml"
    lock.write_text(append_package(lock.read_text(), SDIST))
    proc = envfactory("create", str(lock), "-p", "env", "--platform", "linux-64", cwd=work)
    assert proc.returncode == 1, proc.stderr
    assert "pip package evil 1.0.0 (linux-64, an sdist)" in proc.stderr
    assert "no spec the lock records reaches it" in proc.stderr
    assert "hint: a package nothing requires was added to the lock by hand" in proc.stderr
    assert not (work / "env").exists()


def test_read_lock_refuses_an_appended_conda_package(lock_dir: Path, tmp_path: Path) -> None:
    text = (lock_dir / "conda-lock.yml").read_text()
    # a second copy of cudnn's record under another name: valid in every field, required by none
    entry = re.search(r"^- name: cudnn\n(?:  .*\n)+", text, re.MULTILINE)
    assert entry is not None
    extra = entry.group(0).replace("cudnn", "cudnx")
    path = tmp_path / "conda-lock.yml"
    path.write_text(append_package(text, extra))
    with pytest.raises(UserInputError, match=r"conda package cudnx 7\.6\.5 \(linux-64\)"):
        read_lock(path)


def test_lock_check_reports_an_appended_package(
    lock_dir: Path, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    """The CI flow the README recommends: before, an appended sdist got 'is up to date'."""
    work = copy_set(lock_dir, tmp_path / "work")
    proc = envfactory(*check_args(test_channels), "-o", "locks", cwd=work)
    assert proc.returncode == 0 and "is up to date" in proc.stdout, proc.stdout + proc.stderr
    lock = work / "locks" / COMBO / "conda-lock.yml"
    lock.write_text(append_package(lock.read_text(), SDIST))
    proc = envfactory(*check_args(test_channels), "-o", "locks", cwd=work)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "is stale" in proc.stdout
    assert (
        "linux-64: pip package evil 1.0.0 (linux-64, an sdist) is in the package list, but no "
        "spec the lock records requires it (added by hand?)" in proc.stdout
    )
    assert (
        "pip package evil (https://files.example.org/evil-1.0.0.tar.gz) is in conda-lock.yml "
        "but not in conda-linux-64.lock (added by hand?)" in proc.stdout
    )


def test_lock_check_reports_a_changed_url(
    lock_dir: Path, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    work = copy_set(lock_dir, tmp_path / "work")
    lock = work / "locks" / COMBO / "conda-lock.yml"
    text = lock.read_text()
    old = re.search(r"url: (file://\S+/cudnn-7\.6\.5-cuda10\.0_0\.tar\.bz2)", text)
    assert old is not None
    evil = "https://evil.example.org/main/linux-64/cudnn-7.6.5-cuda10.0_0.tar.bz2"
    lock.write_text(text.replace(old.group(1), evil))
    proc = envfactory(*check_args(test_channels), "-o", "locks", cwd=work)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "conda package cudnn has another URL or hash in conda-lock.yml" in proc.stdout
    assert "(changed by hand?)" in proc.stdout


def test_lock_check_reports_any_edit_of_the_package_list(
    lock_dir: Path, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    """An edit that changes no package (the list's digest differs) is still an edit."""
    work = copy_set(lock_dir, tmp_path / "work")
    lock = work / "locks" / COMBO / "conda-lock.yml"
    lock.write_text(lock.read_text().replace("  optional: false\n", "  optional: no\n", 1))
    proc = envfactory(*check_args(test_channels), "-o", "locks", cwd=work)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the package list is not the one this lock was written with" in proc.stdout


def forge(directory: Path, wheels: Path) -> tuple[str, str]:
    """A consistent forgery of the set in ``directory``: an unrequired wheel appended and made a
    dependency of tensorflow-gpu, cudnn's md5 changed, the explicit file edited the same way, and
    the digests conda-lock.yml records (the explicit file's, the package list's) updated.
    Returns (the added wheel's name, cudnn's new md5)."""
    wheel = next(wheels.glob("astunparse-*.whl"))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = directory / "conda-lock.yml"
    explicit = directory / "conda-linux-64.lock"
    text, listed = lock.read_text(), explicit.read_text()
    old_digest = file_digest(listed.encode())
    md5 = re.search(r"cudnn-7\.6\.5-cuda10\.0_0\.tar\.bz2#([0-9a-f]{32})", listed)
    assert md5 is not None
    forged_md5 = "f" * 32
    listed = listed.replace(md5.group(1), forged_md5)
    listed += f"# pip astunparse @ {wheel.as_uri()}#sha256={sha}\n"
    text = text.replace(f"md5: {md5.group(1)}", f"md5: {forged_md5}")
    text, count = re.subn(
        r"(- name: tensorflow-gpu\n  version: 1\.14\.0\n  manager: pip\n  platform: linux-64\n"
        r"  dependencies:\n)",
        r"\1    astunparse: ''\n",
        text,
    )
    assert count == 1
    text += (
        "- name: astunparse\n  version: 1.6.3\n  manager: pip\n  platform: linux-64\n"
        f"  dependencies: {{}}\n  url: {wheel.as_uri()}\n  hash:\n    sha256: {sha}\n"
        "  category: main\n  optional: false\n"
    )
    assert old_digest in text
    text = text.replace(old_digest, file_digest(listed.encode()))
    # and the digest of the package list the lock records (envfactory.packages_sha256)
    old_list = file_digest((package_block(lock.read_text()) or "").encode())
    assert old_list in text
    text = text.replace(old_list, file_digest((package_block(text) or "").encode()))
    explicit.write_text(listed)
    lock.write_text(text)
    return "astunparse", forged_md5


@pytest.mark.slow
def test_check_resolve_finds_a_consistent_forgery(
    lock_dir: Path, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    work = copy_set(lock_dir, tmp_path / "work")
    proc = envfactory(*check_args(test_channels), "--resolve", "-o", "locks", cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the genuine lock solves to itself
    forge(work / "locks" / COMBO, test_channels["wheels"])
    # what a forger who rewrites the set consistently gets past: the checks without a solve
    proc = envfactory(*check_args(test_channels), "-o", "locks", cwd=work)
    assert proc.returncode == 0 and "is up to date" in proc.stdout, proc.stdout + proc.stderr
    proc = envfactory(*check_args(test_channels), "--resolve", "-o", "locks", cwd=work)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "linux-64: - pip astunparse 1.6.3" in proc.stdout
    assert "(in the lock; the solve does not give it)" in proc.stdout
    assert f"linux-64: ~ conda cudnn: md5 {'f' * 32} -> " in proc.stdout


def test_resolve_needs_check(tmp_path: Path) -> None:
    proc = envfactory("lock", COMBO, "--resolve", cwd=tmp_path)
    assert proc.returncode == 1 and "error: --resolve goes with --check" in proc.stderr


# --- item 7: the activation plan ----------------------------------------------------------------


def plan_with(lock_text: str, edit: dict[str, object]) -> str:
    """The lock with its recorded linux-64 activation plan changed by ``edit``."""
    found = re.search(r"    envfactory\.activation\.linux-64: '(.*?)'\n(?=    \S)", lock_text, re.S)
    assert found is not None
    raw = re.sub(r"\n\s+", " ", found.group(1)).replace("''", "'")
    plan = json.loads(raw)
    plan.update(edit)
    text = json.dumps(plan, sort_keys=True).replace("'", "''")
    return lock_text.replace(found.group(0), f"    envfactory.activation.linux-64: '{text}'\n")


PLANS: dict[str, tuple[dict[str, object], str]] = {
    "PATH gets /tmp/evil first": (
        {"lists": [["PATH", [["literal", "/tmp/evil"]]], ["LD_LIBRARY_PATH", []]]},
        "puts '/tmp/evil' first in PATH, which is not a directory inside the environment",
    ),
    "PATH gets ../../evil inside the prefix": (
        {"lists": [["PATH", [["prefix", "../../evil"]]], ["LD_LIBRARY_PATH", []]]},
        "puts '../../evil' first in PATH",
    ),
    "LD_PRELOAD is a list": (
        {"lists": [["PATH", []], ["LD_PRELOAD", [["prefix", "lib"]]]]},
        "edits the list LD_PRELOAD, which envfactory never edits",
    ),
    "CONDA_EXE is set": (
        {"set": [["CONDA_EXE", ["literal", "/tmp/evil"]]]},
        "sets CONDA_EXE to '/tmp/evil', which envfactory never does",
    ),
    "PYTHONPATH is set inside the prefix": (
        {"set": [["PYTHONPATH", ["prefix", "lib"]]]},
        "sets PYTHONPATH to 'lib', which envfactory never does",
    ),
    "BASH_ENV is set": (
        {"set": [["BASH_ENV", ["literal", "/tmp/x"]]]},
        "sets BASH_ENV",
    ),
    "TF_CPP_MIN_LOG_LEVEL is not a level": (
        {"set": [["TF_CPP_MIN_LOG_LEVEL", ["literal", "2; rm -rf ~"]]]},
        "sets TF_CPP_MIN_LOG_LEVEL",
    ),
    "PATH is unset": ({"unset": ["PATH"]}, "unsets PATH"),
}


@pytest.mark.parametrize("case", sorted(PLANS))
def test_a_recorded_plan_that_redirects_commands_is_refused(
    case: str, lock_dir: Path, tmp_path: Path
) -> None:
    """Before: create installed the plan, and after activation a plain ``ls`` could run the
    lock author's program (PATH) or library (LD_PRELOAD)."""
    edit, message = PLANS[case]
    lock = tmp_path / "conda-lock.yml"
    lock.write_text(plan_with((lock_dir / "conda-lock.yml").read_text(), edit))
    data = read_lock(lock).metadata.activation["linux-64"]
    with pytest.raises(UserInputError) as info:
        ActivationPlan.from_runtime(data, "linux-64", where=str(lock))
    assert message in info.value.message


def test_create_refuses_a_plan_that_puts_a_foreign_directory_on_path(
    lock_dir: Path, tmp_path: Path
) -> None:
    work = copy_set(lock_dir, tmp_path / "work")
    lock = work / "locks" / COMBO / "conda-lock.yml"
    edit, message = PLANS["PATH gets /tmp/evil first"]
    lock.write_text(plan_with(lock.read_text(), edit))
    proc = envfactory("create", str(lock), "-p", "env", "--platform", "linux-64", cwd=work)
    assert proc.returncode == 1, proc.stderr
    assert message in proc.stderr and "hint: " in proc.stderr
    assert not (work / "env").exists()


def test_every_catalog_plan_is_one_a_lock_may_record() -> None:
    catalog = load_catalog()
    checked = 0
    for combo in catalog.combos.values():
        for platform in combo.platforms:
            plan = plan_for(combo, platform)
            assert recorded_plan_problem(plan) is None, (combo.name, platform)
            assert ActivationPlan.from_runtime(plan.runtime(), platform, where="x") == plan
            checked += 1
    assert checked >= 40


@pytest.mark.parametrize(
    "name", ["LD_PRELOAD", "PYTHONPATH", "PYTHONSTARTUP", "BASH_ENV", "DYLD_INSERT_LIBRARIES",
             "Path", "NODE_OPTIONS", "PROMPT_COMMAND"],
)  # fmt: skip
def test_lock_variables_that_redirect_are_refused(
    name: str, lock_dir: Path, tmp_path: Path
) -> None:
    text = (lock_dir / "conda-lock.yml").read_text()
    line = f'    envfactory.variables: \'{{"{name}": "/tmp/evil"}}\'\n'
    text = text.replace("    envfactory.version:", line + "    envfactory.version:", 1)
    path = tmp_path / "conda-lock.yml"
    path.write_text(text)
    with pytest.raises(UserInputError) as info:
        read_lock(path)
    assert f"{name} decides which programs, libraries or start-up code run" in info.value.message


# --- item 7: names, URLs, reading time ----------------------------------------------------------


def test_names_that_differ_only_in_case_are_refused(lock_dir: Path, tmp_path: Path) -> None:
    """Before: rattler panicked on ``Foo`` beside ``foo`` (a traceback, no hint)."""
    text = (lock_dir / "conda-lock.yml").read_text()
    entry = re.search(r"^- name: cudnn\n(?:  .*\n)+", text, re.MULTILINE)
    assert entry is not None
    path = tmp_path / "conda-lock.yml"
    path.write_text(append_package(text, entry.group(0).replace("cudnn", "CUDNN")))
    with pytest.raises(UserInputError) as info:
        read_lock(path)
    assert (
        "conda packages 'CUDNN' and 'cudnn' for linux-64 are one name to conda (names are "
        "compared case-insensitively)" in info.value.message
    )


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("file:///etc/passwd?/linux-64/cudnn-7.6.5-cuda10.0_0.tar.bz2", "has a query"),
        ("file://otherhost/ch/linux-64/cudnn-7.6.5-cuda10.0_0.tar.bz2", "names the host"),
        ("https://h/ch/linux-64/x.tar.bz2?/linux-64/cudnn-7.6.5-cuda10.0_0.tar.bz2",
         "has a query"),
    ],
)  # fmt: skip
def test_urls_are_judged_as_parsed(url: str, problem: str, lock_dir: Path, tmp_path: Path) -> None:
    """Before: the subdir and file name were read off the text, the file off the parsed URL,
    so ``file:///etc/passwd?/linux-64/<the package's name>`` passed and create read
    /etc/passwd."""
    text = (lock_dir / "conda-lock.yml").read_text()
    old = re.search(r"url: (file://\S+/cudnn-7\.6\.5-cuda10\.0_0\.tar\.bz2)", text)
    assert old is not None
    path = tmp_path / "conda-lock.yml"
    path.write_text(text.replace(old.group(1), url))
    with pytest.raises(UserInputError) as info:
        read_lock(path)
    assert problem in info.value.message


def test_a_pip_url_with_an_encoded_slash_is_refused(lock_dir: Path, tmp_path: Path) -> None:
    """Before: accepted (a pip URL has no subdir to check), and the cache read the file its
    unquoted path names: /srv/wheels/x/../../../etc/passwd."""
    text = (lock_dir / "conda-lock.yml").read_text()
    old = re.search(r"url: (file://\S+/absl_py-2\.1\.0-py3-none-any\.whl)", text)
    assert old is not None
    path = tmp_path / "conda-lock.yml"
    path.write_text(
        text.replace(old.group(1), "file:///srv/wheels/x%2f..%2f..%2f..%2fetc%2fpasswd")
    )
    with pytest.raises(UserInputError) as info:
        read_lock(path)
    assert "its path has an encoded '/' or a backslash" in info.value.message


def test_url_problem_decodes_before_judging() -> None:
    assert url_problem("file:///a/%2E%2e/b") == "it has a '.' or '..' path segment"
    assert url_problem("file:///a/b?x") is not None
    assert url_problem("https://conda.anaconda.org/t/<TOKEN>/c/linux-64/x-1-0.conda") is None


def toposort_steps(n: int) -> int:
    """Lines of lockfile.py run (``sys.settrace``'s line events, a count of the work done in
    Python) while sorting a chain of ``n`` packages, each needing the next."""
    import envfactory.lockfile.read as lockfile

    names = [f"p{i:06d}" for i in range(n)]
    graph = {names[i]: {names[i + 1]} if i + 1 < n else set() for i in range(n)}
    steps = 0

    def line(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal steps
        steps += event == "line"
        return line

    def call(frame: FrameType, event: str, arg: object) -> Any:
        return line if frame.f_code.co_filename == lockfile.__file__ else None

    previous = sys.gettrace()
    sys.settrace(call)
    try:
        order = toposort(graph)
    finally:
        sys.settrace(previous)
    assert order == names[::-1]
    return steps


def test_the_lock_reader_sorts_in_linear_time() -> None:
    """A 16,000-package lock took 12-20 s to read: conda's toposort rescans every remaining
    name each round, n**2 for a chain. Doubling the chain must about double the work (the old
    sort quadrupled it); timings are in benchmarks/bench_lock_read.py."""
    small, large = toposort_steps(1000), toposort_steps(2000)
    assert large < 2.5 * small, (small, large)


# --- item 7: credentials ------------------------------------------------------------------------

TOKEN = "tk-SECRET42"
USER, PASSWORD = "alice", "s3cret-pw"


class _Handler(http.server.SimpleHTTPRequestHandler):
    """A channel server that wants credentials: ``/t/<TOKEN>/...`` (anaconda.org's form), or
    HTTP basic auth for any other path."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/t/"):
            if not self.path.startswith(f"/t/{TOKEN}/"):
                self.send_error(403)
                return
            self.path = self.path[len(f"/t/{TOKEN}") :]
        else:
            wanted = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            if self.headers.get("Authorization") != wanted:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="channel"')
                self.end_headers()
                return
        super().do_GET()


@pytest.fixture(scope="module")
def server(test_channels: dict[str, Path]) -> Iterator[str]:
    root = test_channels["defaults"].parent
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(root))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def every_byte(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


@pytest.mark.slow
def test_a_channel_token_stays_out_of_files_and_messages(
    server: str, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    """Before: the token went into conda-lock.yml, the explicit file and every conda-meta
    record (world-readable), and into error messages."""
    secret = f"defaults=http://{server}/t/{TOKEN}/defaults"
    args = ["--platform", "linux-64", "--pip-index", str(test_channels["wheels"])]
    proc = envfactory("lock", COMBO, "-o", "locks", "--channel-map", secret, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lock_set = tmp_path / "locks" / COMBO
    assert TOKEN.encode() not in every_byte(lock_set)
    assert f"http://{server}/t/<TOKEN>/defaults/linux-64/".encode() in every_byte(lock_set)
    assert TOKEN not in proc.stdout + proc.stderr
    check = ["lock", COMBO, "--check", "-o", "locks", "--channel-map", secret, *args]
    proc = envfactory(*check, cwd=tmp_path)
    assert proc.returncode == 0 and "is up to date" in proc.stdout, proc.stdout + proc.stderr

    lock = str(lock_set / "conda-lock.yml")
    proc = envfactory("create", lock, "-p", "env0", "--platform", "linux-64", cwd=tmp_path)
    assert proc.returncode == 1
    assert "<TOKEN>" in proc.stderr and "hint: " in proc.stderr and "--channel-map" in proc.stderr

    wrong = f"defaults=http://{server}/t/tk-WRONG77/defaults"
    create = ["create", lock, "--platform", "linux-64", "--channel-map"]
    proc = envfactory(*create, wrong, "-p", "env1", cwd=tmp_path)
    assert proc.returncode != 0 and "403" in proc.stderr, proc.stderr
    assert "tk-WRONG77" not in proc.stderr and "/t/<TOKEN>/" in proc.stderr

    proc = envfactory(*create, secret, "-p", "env", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = tmp_path / "env" / "conda-meta"
    assert len(list(records.glob("*.json"))) > 5
    assert TOKEN.encode() not in every_byte(tmp_path / "env")
    assert TOKEN not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_channel_password_stays_out_of_the_lock_and_netrc_supplies_it(
    server: str, test_channels: dict[str, Path], tmp_path: Path
) -> None:
    secret = f"defaults=http://{USER}:{PASSWORD}@{server}/defaults"
    args = ["--platform", "linux-64", "--pip-index", str(test_channels["wheels"])]
    proc = envfactory("lock", COMBO, "-o", "locks", "--channel-map", secret, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lock_set = tmp_path / "locks" / COMBO
    assert PASSWORD.encode() not in every_byte(lock_set)
    assert f"http://{server}/defaults/linux-64/".encode() in every_byte(lock_set)
    lock = str(lock_set / "conda-lock.yml")
    # no credentials: the server refuses, and the message says so without any
    proc = envfactory("create", lock, "-p", "env0", "--platform", "linux-64", cwd=tmp_path)
    assert proc.returncode != 0 and "401" in proc.stderr, proc.stderr
    # ~/.netrc (read by requests) gives them, as it does to conda and pip
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine 127.0.0.1\nlogin {USER}\npassword {PASSWORD}\n")
    (home / ".netrc").chmod(0o600)
    proc = envfactory("create", lock, "-p", "env", "--platform", "linux-64", cwd=tmp_path,
                      home=home)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert PASSWORD.encode() not in every_byte(tmp_path / "env")


def test_redaction_follows_condas_conventions() -> None:
    assert redact_url("https://u:p@h/c") == "https://h/c"
    assert redact_url("https://conda.anaconda.org/t/ab-12/c/linux-64/x.conda") == (
        "https://conda.anaconda.org/t/<TOKEN>/c/linux-64/x.conda"
    )
    assert redact_url("file:///srv/t/mirror") == "file:///srv/t/mirror"  # a directory called t
    message = "cannot download https://u:pw@h/t/tok/x: Max retries exceeded with url: /t/tok/x"
    assert redact(message) == (
        "cannot download https://h/t/<TOKEN>/x: Max retries exceeded with url: /t/<TOKEN>/x"
    )
    # a path that only looks like one is printed as it is
    assert safe_text("package cache /home/me/t/envs/pkgs") == "package cache /home/me/t/envs/pkgs"


# --- item 7: control characters -----------------------------------------------------------------

HOSTILE_LOG = (
    "building\n"
    "\x1b]52;c;ZWNobyBwd25lZA==\x07ImportError: libcudart.so.10.0: cannot open shared object "
    "file: No such file or directory\x1b[2J\r\x1b]0;owned\x1b\\\u202e\x9b31m\n"
)


@pytest.mark.parametrize("as_json", [False, True])
def test_explain_echoes_no_escape_sequence(as_json: bool, tmp_path: Path) -> None:
    """Before: the ESC/BEL/CR bytes of the log reached the terminal (clipboard write through
    OSC 52, window title, screen clear)."""
    log = tmp_path / "log.txt"
    log.write_text(HOSTILE_LOG, encoding="utf-8")
    proc = envfactory("explain", str(log), *(["--json"] if as_json else []), cwd=tmp_path)
    assert "libcudart.so.10.0" in proc.stdout, proc.stdout + proc.stderr
    shown = json.dumps(json.loads(proc.stdout)) if as_json else proc.stdout
    for char in ("\x1b", "\x07", "\r", "\u202e", "\x9b", "\\u001b", "\\u0007", "]52;"):
        assert char not in shown, char


def test_errors_echo_no_escape_sequence(tmp_path: Path) -> None:
    proc = envfactory("show", "tf114\x1b]0;owned\x07\x1b[2J", cwd=tmp_path)
    assert proc.returncode == 1 and "error: " in proc.stderr
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr


def test_terminal_text_keeps_what_is_printable() -> None:
    assert terminal_text("a\tb\nc é 中 ✓") == "a\tb\nc é 中 ✓"
    assert terminal_text("a\x1b[31mred\x1b[0m\x08\x7f") == "ared"
    assert safe_text("\x1b]52;c;eA==\x07https://u:p@h/x") == "https://h/x"
