"""The activation plan, the files it renders, and the core (envfactory/activation/core.py: the
one algorithm every shell runs) under hypothesis: activate then deactivate gives the start
back, in both of conda's orders, stacked and switched; the foreign-CUDA rule doctor shares."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shells import conda_sim

from envfactory import __version__
from envfactory.activation import core
from envfactory.activation.plan import (
    CORE_RELPATH,
    LAUNCHER,
    activation_scripts,
    failed_line,
    install_activation,
    is_foreign_cuda,
    plan_for,
)
from envfactory.catalog.loader import load_catalog

CORE_DIR = CORE_RELPATH.rsplit("/", 1)[0]

Env = dict[str, str]


def apply(env: Env, changes: dict[str, str | None]) -> Env:
    out = dict(env)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def core_runner(plans: dict[str, dict[str, Any]], is_dir: Callable[[str], bool]) -> Any:
    def run(prefix: str, phase: str, env: Env) -> Env:
        plan = plans[prefix]
        if phase == "activate":
            return apply(env, core.activate(env, plan, is_dir))
        return apply(env, core.deactivate(env, plan))

    return run


def ours(env: Env) -> Env:
    return {k: v for k, v in env.items() if not k.startswith("_ENVFACTORY_")}


def test_plan_linux_pip_route_puts_lib_first_and_windows_puts_library_bin_first() -> None:
    catalog = load_catalog()
    linux = plan_for(catalog.combo("tf114-cuda100"), "linux-64")
    assert [(e.variable, [v.text for v in e.prepend]) for e in linux.lists] == [
        ("PATH", []),
        ("LD_LIBRARY_PATH", ["lib"]),
    ]
    conda_route = plan_for(catalog.combo("tf114-cuda101"), "linux-64")
    assert conda_route.lists[1].prepend == ()
    windows = plan_for(catalog.combo("tf114-cuda100"), "win-64")
    assert windows.lists[0].prepend[0].text == "Library\\bin"
    assert windows.set_vars[0][0] == "CUDA_PATH"
    assert dict(windows.set_vars)["TF_CPP_MIN_LOG_LEVEL"].text == "2"
    lists, wanted = windows.resolved(r"D:\e")
    assert lists == [("PATH", [r"D:\e\Library\bin"])]
    assert wanted == {"CUDA_PATH": r"D:\e\Library", "TF_CPP_MIN_LOG_LEVEL": "2"}


def test_files_are_stubs_a_plan_and_the_core_deterministic_and_self_describing(
    tmp_path: Path,
) -> None:
    combo = load_catalog().combo("tf114-cuda100")
    first = activation_scripts(combo, "linux-64")
    assert first == activation_scripts(combo, "linux-64")
    names = [f.relpath for f in first]
    assert names == sorted(
        [CORE_RELPATH, "etc/conda/envfactory/envfactory-tf114-cuda100.json"]
        + [
            f"etc/conda/{phase}.d/envfactory-tf114-cuda100.{ext}"
            for phase in ("activate", "deactivate")
            for ext in ("sh", "csh", "fish", "xsh")
        ]
    )
    files = {f.relpath: f.content for f in first}
    assert files[CORE_RELPATH] == Path(core.__file__).read_text(encoding="utf-8")
    for f in first:
        if f.relpath.startswith("etc/conda/activate.d") or "deactivate.d" in f.relpath:
            assert f"envfactory {__version__}" in f.content.splitlines()[0]
            assert "tf114-cuda100" in f.content.splitlines()[0]
            assert len(f.content.splitlines()) <= 35  # a stub: reading it is the review
        assert f.content.endswith("\n") and "\r" not in f.content
    written = install_activation(tmp_path, combo, "linux-64")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == names


def test_the_core_is_python_3_6_and_standard_library_only() -> None:
    source = Path(core.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source, feature_version=(3, 6))  # a 3.7+ construct is a SyntaxError
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    # typing only under `if MYPY:`, which never runs; json only where _json is missing
    assert imported <= {"os", "sys", "typing", "_json", "json"}, imported
    assert "from __future__" not in source and "dataclass" not in source
    # what an activation really loads: json's C half, not json, re, enum (start-up time)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); import core; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(Path(core.__file__).parent)],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(proc.stdout.split())
    assert "_json" in loaded and not loaded & {"json", "re", "enum", "functools"}, loaded


# --- the foreign-CUDA rule -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "os_name", "foreign"),
    [
        ("/usr/local/cuda/bin", "linux", True),
        ("/usr/local/cuda-10.0/lib64", "linux", True),
        ("/usr/local/cuda-11.2/extras/CUPTI/lib64", "linux", True),
        ("/opt/cuda/lib", "linux", True),
        ("/home/u/cuda-11.2/lib64", "linux", True),  # doctor's regex caught it, globs did not
        ("/opt/cudnn-8.1/lib64", "linux", True),
        ("/usr/lib/x86_64-linux-gnu", "linux", False),
        ("/home/u/cuda-notes/bin", "linux", False),
        ("/home/u/src/usr/local/cuda/bin", "linux", False),
        ("usr/local/cuda/bin", "linux", False),
        (r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v10.0\bin", "windows", True),
        (r"c:\program files\nvidia gpu computing toolkit\cuda\v11.2\libnvvp\\", "windows", True),
        (r"C:\tools\cuda\bin", "windows", True),
        (r"C:\tools\cudnn\bin", "windows", True),  # the globs missed it, doctor caught it
        (r"D:\sdk\cuda-11.2\bin", "windows", True),
        (r"C:\Windows\System32", "windows", False),
        (r"C:\Program Files\NVIDIA Corporation\NVSMI", "windows", False),
    ],
)
def test_the_foreign_cuda_rule(path: str, os_name: str, foreign: bool) -> None:
    assert is_foreign_cuda(path, os_name) is foreign
    plan = plan_for(
        load_catalog().combo("tf114-cuda100"), "win-64" if os_name == "windows" else "linux-64"
    ).runtime()
    assert core.foreign(path, "/envs/A", plan, lambda p: False) is foreign


def test_directories_inside_the_environment_are_never_foreign() -> None:
    assert not is_foreign_cuda("/opt/cuda/envs/tf/lib", "linux", "/opt/cuda/envs/tf")
    assert is_foreign_cuda("/opt/cuda/envs/tf2/lib", "linux", "/opt/cuda/envs/tf")
    prefix = r"C:\tools\cuda-envs\tf"
    assert not is_foreign_cuda(prefix.upper() + r"\Library\bin", "windows", prefix)


# --- the algorithm under hypothesis ---------------------------------------------------------

PIECES = ["a", "b b", "(x86)", "&", "%P%", "!", '"', "'", ";", "é", "\\", "$x", "*", "-"]
plain = st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map(lambda p: "/u/" + "".join(p))
foreign_entry = st.sampled_from(
    ["/usr/local/cuda/bin", "/usr/local/cuda-10.0/lib64", "/opt/cuda/lib", "/usr/local/cuda-9/bin/"]
)
entry = st.one_of(plain, foreign_entry, st.just(""), st.just("/other env/lib"))
path_value = st.one_of(st.none(), st.just(""), st.lists(entry, max_size=7).map(":".join))


def start_env(path: str | None, ld: str | None, cuda: str | None) -> Env:
    env = {"USER_KEEP": "1"}
    for name, value in (("PATH", path), ("LD_LIBRARY_PATH", ld), ("CUDA_PATH_V10_0", cuda)):
        if value is not None:
            env[name] = value
    return env


def is_dir(path: str) -> bool:
    return path in ("/other env/conda-meta", "/envs/A/conda-meta", "/envs/B/conda-meta")


PLAN_A = plan_for(load_catalog().combo("tf114-cuda100"), "linux-64").runtime()
PLAN_B = plan_for(load_catalog().combo("tf210-cuda112"), "linux-64").runtime()
RUN = core_runner({"/envs/A": PLAN_A, "/envs/B": PLAN_B}, is_dir)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path_value, path_value, st.one_of(st.none(), st.text(max_size=5)))
def test_activate_then_deactivate_gives_the_start_back(
    path: str | None, ld: str | None, cuda: str | None
) -> None:
    start = start_env(path, ld, cuda) | {"CONDA_PREFIX": "/envs/A"}
    active = RUN("/envs/A", "activate", start)
    assert RUN("/envs/A", "activate", active) == active  # a second activation changes nothing
    for name in ("PATH", "LD_LIBRARY_PATH"):
        for item in (active.get(name) or "").split(":"):
            assert not item.startswith(("/usr/local/cuda", "/opt/cuda", "/other env"))
    assert "CUDA_PATH_V10_0" not in active and active["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert active["LD_LIBRARY_PATH"].split(":")[0] == "/envs/A/lib"
    assert RUN("/envs/A", "deactivate", active) == start


@settings(max_examples=300, deadline=None)
@given(
    path_value.filter(lambda v: v is not None),  # conda never gives back an unset PATH
    path_value,
    st.lists(plain, max_size=2),
    st.booleans(),
)
def test_both_conda_orders_and_the_users_edits(
    path: str | None, ld: str | None, pre: list[str], switch: bool
) -> None:
    """Stack A then B; the user prepends to PATH while B is active; deactivate B (conda's
    order: PATH first) or switch B -> A (deactivate.d first); then deactivate A."""
    # Known limit: a PATH of only empty and foreign entries is, once conda drops its block,
    # "" either way; [""] and [] cannot be told apart. A real PATH has /usr/bin in it.
    start = start_env(f"{path}:/usr/bin" if path else "/usr/bin", ld, None)
    env = conda_sim.activate(start, "/envs/A", RUN)
    env = conda_sim.activate(env, "/envs/B", RUN, stack=True)
    assert "/envs/A/lib" not in (env.get("LD_LIBRARY_PATH") or "").split(":")
    env["PATH"] = ":".join([*pre, env["PATH"]]) if pre else env["PATH"]
    if switch:
        env = conda_sim.activate(env, "/envs/A", RUN)  # B -> A in place at level 2
        env = conda_sim.deactivate(env, RUN)
    else:
        env = conda_sim.deactivate(env, RUN)
    env = conda_sim.deactivate(env, RUN)
    expected = dict(start)
    if pre:
        expected["PATH"] = ":".join(
            [*pre, *(start["PATH"].split(":") if start.get("PATH") else [])]
        )
    assert ours(env) == expected


def test_values_the_user_changed_after_activation_stay() -> None:
    start = {"PATH": "/usr/bin:/usr/local/cuda/bin", "TF_CPP_MIN_LOG_LEVEL": "0"}
    active = RUN("/envs/A", "activate", start | {"CONDA_PREFIX": "/envs/A"})
    assert active["PATH"] == "/usr/bin"
    mine = active | {"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/mine"}
    back = RUN("/envs/A", "deactivate", mine)
    assert back["TF_CPP_MIN_LOG_LEVEL"] == "3"
    assert back["PATH"] == "/usr/bin:/mine:/usr/local/cuda/bin"


def test_a_switch_defers_the_path_undo_to_the_next_activation() -> None:
    """conda's switch: A's deactivate.d runs while A's bin block is on PATH, then conda exports
    the PATH it computed before; B's activation puts back what A removed, then removes it as
    its own, so B's deactivation (and A's later) give it back."""
    start = {"PATH": "/envs/A/bin:/usr/local/cuda/bin:/usr/bin", "CONDA_PREFIX": "/envs/A"}
    start |= {"CONDA_SHLVL": "1"}
    active = RUN("/envs/A", "activate", start)
    assert active["PATH"] == "/envs/A/bin:/usr/bin"
    changes = core.deactivate(active, PLAN_A)
    assert "PATH" not in changes and core.CARRY in changes  # conda would overwrite it anyway
    switched = apply(active, changes) | {"PATH": "/envs/B/bin:/usr/bin", "CONDA_SHLVL": "2"}
    switched["CONDA_PREFIX"] = "/envs/B"
    on_b = RUN("/envs/B", "activate", switched)
    assert on_b["PATH"] == "/envs/B/bin:/usr/bin" and core.CARRY not in on_b
    off_b = RUN("/envs/B", "deactivate", on_b | {"PATH": "/usr/bin"})  # conda removed B's block
    assert off_b["PATH"] == "/usr/local/cuda/bin:/usr/bin"


def test_windows_plan_is_case_insensitive_and_keeps_its_own_library_bin() -> None:
    plan = plan_for(load_catalog().combo("tf114-cuda100"), "win-64").runtime()
    cuda = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v10.0"
    start = {
        "PATH": rf"C:\Windows;{cuda}\bin;{cuda}\libnvvp;c:\TOOLS\cuda\bin\;D:\e\Library\bin",
        "CUDA_PATH": cuda,
        "CUDA_PATH_V10_0": cuda,
        "CONDA_PREFIX": r"D:\e",
    }
    active = apply(start, core.activate(start, plan, lambda p: False))
    assert active["PATH"] == r"D:\e\Library\bin;C:\Windows;D:\e\Library\bin"
    assert active["CUDA_PATH"] == r"D:\e\Library" and "CUDA_PATH_V10_0" not in active
    assert apply(active, core.deactivate(active, plan)) == start


# --- names and values the shells cannot carry (issue 10, row 6) -----------------------------

BAD_NAMES = ["CUDA_PATH_V;touch M;x", "CUDA_PATH_V$(touch M)", "CUDA_PATH_V\nx", "CUDA_PATH_Vé"]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("shell", core.SHELLS)
def test_inherited_names_that_are_not_identifiers_are_left_alone(name: str, shell: str) -> None:
    start = {"PATH": "/usr/bin", "CONDA_PREFIX": "/envs/A", name: "x", "CUDA_PATH_V9_0": "y"}
    changes = core.activate(start, PLAN_A, is_dir)
    assert name not in changes and changes["CUDA_PATH_V9_0"] is None
    record = changes[core.STATE + "0"]
    assert record is not None and "touch" not in record
    out = core.emit_cmd(changes, start) if shell == "cmd" else core.EMITTERS[shell](changes, start)
    assert "touch" not in out and "CUDA_PATH_V9_0" in out
    active = apply(start, changes)
    assert apply(active, core.deactivate(active, PLAN_A)) == start


@pytest.mark.parametrize("shell", core.SHELLS)
def test_emitters_refuse_a_name_that_is_not_an_identifier(shell: str) -> None:
    with pytest.raises(core.Refused, match="cannot be written"):
        if shell == "cmd":
            core.emit_cmd({"A;B": "1"}, {})
        else:
            core.EMITTERS[shell]({"A;B": "1"}, {})


@pytest.mark.parametrize(
    ("shell", "value", "why"),
    [
        ("csh", "a\nb", "line break"),
        ("cmd", "a\rb", "control character U\\+000D"),
        ("cmd", "a\x01b", "control character U\\+0001"),
        ("cmd", "x\u0100", "no variable of the environment holds"),
        ("fish", "a\udcffb", "not text"),
        ("xonsh", "a\udcffb", "not text"),
    ],
)
def test_emitters_refuse_values_their_shell_cannot_carry(shell: str, value: str, why: str) -> None:
    with pytest.raises(core.Refused, match=why):
        if shell == "cmd":
            core.emit_cmd({"V": value}, {})
        else:
            core.EMITTERS[shell]({"V": value}, {})


def test_a_refusal_prints_one_line_and_no_edits(tmp_path: Path) -> None:
    install_activation(tmp_path, load_catalog().combo("tf114-cuda100"), "linux-64")
    env = {"PATH": "/usr/bin\n:/usr/local/cuda/bin", "CONDA_PREFIX": str(tmp_path)}
    failed = failed_line("activate", "tf114-cuda100")
    argv = [sys.executable, "-I", "-S", "-c", LAUNCHER, failed, str(tmp_path / CORE_DIR)]
    proc = subprocess.run(
        [*argv, "activate", "csh", "tf114-cuda100"],
        env=env,
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 1 and proc.stdout == b""
    assert proc.stderr.decode().count("\n") == 1
    assert "csh cannot hold a line break (in PATH); nothing was changed" in proc.stderr.decode()


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        ("def broken(:\n", "SyntaxError"),
        ("raise RuntimeError('a bug')\n", "RuntimeError"),
        (None, "ModuleNotFoundError"),
    ],
    ids=["syntax", "bug", "missing"],
)
def test_a_core_that_cannot_run_gives_one_line_and_no_edits(
    tmp_path: Path, damage: str | None, error: str
) -> None:
    """The launcher's hook: a damaged or missing activation.py is one line naming the failure
    (no traceback), exit 1, nothing on stdout for the stub to apply."""
    install_activation(tmp_path, load_catalog().combo("tf114-cuda100"), "linux-64")
    core_file = tmp_path / CORE_RELPATH
    if damage is None:
        core_file.unlink()
    else:
        core_file.write_text(damage, encoding="utf-8")
    failed = failed_line("activate", "tf114-cuda100")
    argv = [sys.executable, "-I", "-S", "-c", LAUNCHER, failed, str(tmp_path / CORE_DIR)]
    proc = subprocess.run(
        [*argv, "activate", "sh", "tf114-cuda100"],
        env={"PATH": "/usr/bin", "CONDA_PREFIX": str(tmp_path)},
        capture_output=True,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (1, b"")
    assert proc.stderr.decode() == failed + error + "\n"


def test_the_launcher_fits_every_shells_quoting() -> None:
    """It is pasted into the .bat inside double quotes and into the .ps1 inside single ones."""
    assert not set(LAUNCHER) & set("\"'%!^&|<>`$")
    assert not set(failed_line("deactivate", "tf114-cuda100")) & set("\"'%!^&|<>`$")


@pytest.mark.parametrize("name", ["tf114-cuda100", "tf210-cuda112", "tf215-cuda122"])
def test_every_linux_stub_parses(name: str, tmp_path: Path) -> None:
    install_activation(tmp_path, load_catalog().combo(name), "linux-64")
    for script in sorted(tmp_path.glob("etc/conda/*.d/*")):
        checker = {".sh": ["dash", "-n"], ".fish": ["fish", "--no-execute"]}.get(script.suffix)
        if checker:
            proc = subprocess.run([*checker, str(script)], capture_output=True, check=False)
            assert proc.returncode == 0, proc.stderr


json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(json_data)
def test_the_cores_own_json_codec_agrees_with_json(data: Any) -> None:
    """The core carries a small JSON codec (importing json costs start-up time)."""
    expected = json.dumps(data, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    assert core._dump(data) == expected
    assert core._load(expected, "x") == data
    assert core._load(json.dumps(data, indent=1), "x") == data


@pytest.mark.parametrize(
    "bad", ["", "{", "[1,]", '{"a" 1}', "nul", '"abc', "[1 2]", "-", "{1:2}", "1.5", "NaN", "1e3"]
)
def test_the_cores_json_reader_refuses_what_is_not_json(bad: str) -> None:
    with pytest.raises(core.Refused, match="not envfactory's JSON"):
        core._load(bad, "x")


def test_the_json_half_of_python_is_the_fallback_where_json_s_c_half_is_missing() -> None:
    """A Python built without _json reads and writes the same (json's Python half)."""
    probe = """
import sys
sys.modules["_json"] = None  # import _json raises ImportError
sys.path.insert(0, sys.argv[1])
import core
import json
data = {"b": [1, None, True, "x\\u00e9\\U0001f600\\"'"], "a": {}}
text = core._dump(data)
assert core._load(text, "x") == data and json.scanner.c_make_scanner is None
assert text == json.dumps(data, sort_keys=True, separators=(",", ":"))
accepted = []
for bad in ("1.5", "NaN", "[1,]", "{", '"a'):
    try:
        core._load(bad, "x")
        accepted.append(bad)
    except core.Refused:
        pass
print(accepted)
"""
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(Path(core.__file__).parent)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout == "[]\n", proc.stderr
