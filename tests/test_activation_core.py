"""The activation plan, the rendered files, and the algorithm (envfactory_core.py, the reference
the shells are held to) under hypothesis: activate then deactivate gives the start back."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shells import conda_sim

from envfactory import __version__
from envfactory.activation.plan import activation_scripts, install_activation, plan_for
from envfactory.catalog.loader import load_catalog
from envfactory.templating import templates_dir

CORE: dict[str, Any] = {}
exec(  # the very file the .xsh scripts include
    (templates_dir() / "activation" / "envfactory_core.py").read_text(encoding="utf-8"), CORE
)
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
            return apply(env, CORE["envfactory_activate"](env, plan, is_dir))
        return apply(env, CORE["envfactory_deactivate"](env, plan))

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


def test_scripts_are_deterministic_and_say_what_made_them(tmp_path: Path) -> None:
    combo = load_catalog().combo("tf114-cuda100")
    first = activation_scripts(combo, "linux-64")
    assert first == activation_scripts(combo, "linux-64")
    names = [f.relpath for f in first]
    assert "etc/conda/activate.d/envfactory-tf114-cuda100.sh" in names
    assert "etc/conda/deactivate.d/envfactory-tf114-cuda100.fish" in names
    for f in first:
        assert f"envfactory {__version__}" in f.content.splitlines()[0]
        assert "tf114-cuda100" in f.content.splitlines()[0]
        assert f.content.endswith("\n") and "\r" not in f.content
    written = install_activation(tmp_path, combo, "linux-64")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == names


# --- the algorithm under hypothesis ---------------------------------------------------------

PIECES = ["a", "b b", "(x86)", "&", "%P%", "!", '"', "'", ";", "é", "\\", "$x", "*", "-"]
plain = st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map(lambda p: "/u/" + "".join(p))
foreign = st.sampled_from(
    ["/usr/local/cuda/bin", "/usr/local/cuda-10.0/lib64", "/opt/cuda/lib", "/usr/local/cuda-9/bin/"]
)
entry = st.one_of(plain, foreign, st.just(""), st.just("/other env/lib"))
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
    st.lists(plain, max_size=2),
    st.booleans(),
)
def test_both_conda_orders_and_the_users_edits(
    path: str | None, ld: str | None, pre: list[str], post: list[str], switch: bool
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
    del post


def test_values_the_user_changed_after_activation_stay() -> None:
    start = {"PATH": "/usr/bin:/usr/local/cuda/bin", "TF_CPP_MIN_LOG_LEVEL": "0"}
    active = RUN("/envs/A", "activate", start | {"CONDA_PREFIX": "/envs/A"})
    assert active["PATH"] == "/usr/bin"
    mine = active | {"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/mine"}
    back = RUN("/envs/A", "deactivate", mine)
    assert back["TF_CPP_MIN_LOG_LEVEL"] == "3"
    assert back["PATH"] == "/usr/bin:/mine:/usr/local/cuda/bin"


def test_windows_plan_is_case_insensitive_and_keeps_its_own_library_bin() -> None:
    plan = plan_for(load_catalog().combo("tf114-cuda100"), "win-64").runtime()
    cuda = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v10.0"
    start = {
        "PATH": rf"C:\Windows;{cuda}\bin;{cuda}\libnvvp;c:\TOOLS\cuda\bin\;D:\e\Library\bin",
        "CUDA_PATH": cuda,
        "CUDA_PATH_V10_0": cuda,
        "CONDA_PREFIX": r"D:\e",
    }
    changes = CORE["envfactory_activate"](start, plan, lambda p: False)
    active = apply(start, changes)
    assert active["PATH"] == r"D:\e\Library\bin;C:\Windows;D:\e\Library\bin"
    assert active["CUDA_PATH"] == r"D:\e\Library" and "CUDA_PATH_V10_0" not in active
    assert apply(active, CORE["envfactory_deactivate"](active, plan)) == start


@pytest.mark.parametrize("name", ["tf114-cuda100", "tf210-cuda112", "tf215-cuda122"])
def test_every_linux_script_parses(name: str, tmp_path: Path) -> None:
    import subprocess

    install_activation(tmp_path, load_catalog().combo(name), "linux-64")
    for script in sorted(tmp_path.glob("etc/conda/*.d/*")):
        checker = {".sh": ["dash", "-n"], ".fish": ["fish", "--no-execute"]}.get(script.suffix)
        if checker:
            proc = subprocess.run([*checker, str(script)], capture_output=True, check=False)
            assert proc.returncode == 0, proc.stderr
    assert os.access(tmp_path, os.R_OK)
