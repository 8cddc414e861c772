"""Jupyter kernels that carry an environment's activation.

A kernel that Jupyter starts from another environment runs the env's python directly: no
``activate.d`` script runs, so the CUDA libraries of a TF1 environment are not first on the
library path and ``TF_CPP_MIN_LOG_LEVEL`` is unset (tensorflow/tensorflow#60790). The kernel.json
written here sets what the activation plan (``envfactory.activation.plan.plan_for``) sets:

* ``PATH``: the env's own directories (as conda's activation puts them), then the plan's, then
  ``${PATH}`` -- jupyter_client substitutes ``${NAME}`` in a kernelspec's ``env`` from the
  environment of the Jupyter server (``string.Template.safe_substitute``);
* ``LD_LIBRARY_PATH`` (Linux): exactly the plan's directories, so a foreign CUDA's ``lib64``
  that the server's environment carries cannot shadow the env's libraries;
* the plan's variables (``TF_CPP_MIN_LOG_LEVEL``, ``CUDA_PATH`` on Windows); a variable the plan
  unsets (``CUDA_PATH`` on Linux) is set empty, the nearest a kernelspec can come to unsetting;
* the project environment's ``variables`` (``conda-meta/state``), and ``CONDA_PREFIX``.

What a kernelspec cannot do: take foreign CUDA entries out of the inherited ``PATH`` (they stay
behind the env's own directories, which come first) or unset ``CUDA_PATH_V*`` on Windows.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import Platform, os_of
from envfactory.errors import UserInputError
from envfactory.fsio import atomic_write

Target = Literal["user", "env"]
TARGETS: tuple[Target, ...] = ("user", "env")
KERNELS = ("share", "jupyter", "kernels")


@dataclass(frozen=True)
class EnvironmentFacts:
    """What an envfactory-created prefix says about itself (``conda-meta``)."""

    prefix: Path
    combo: str
    platform: Platform
    environment: str | None
    variables: Mapping[str, str]

    @property
    def label(self) -> str:
        return self.environment or self.combo


def read_facts(prefix: Path) -> EnvironmentFacts:
    from envfactory.build.create import MARKER

    marker = prefix / "conda-meta" / MARKER
    if not marker.is_file():
        raise UserInputError(
            f"{prefix} was not created by envfactory (no conda-meta/{MARKER})",
            "create it with 'envfactory create', or pass the prefix of one that was",
        )
    recorded = json.loads(marker.read_text(encoding="utf-8"))
    combo = recorded.get("combo") or _combo_from_lock(Path(recorded["lock"]))
    state = prefix / "conda-meta" / "state"
    variables = (
        json.loads(state.read_text(encoding="utf-8")).get("env_vars", {}) if state.is_file() else {}
    )
    return EnvironmentFacts(
        prefix=prefix,
        combo=combo,
        platform=recorded["platform"],
        environment=recorded.get("environment"),
        variables={str(k): str(v) for k, v in variables.items()},
    )


def _combo_from_lock(lock: Path) -> str:
    from envfactory.build import condalock_adapter
    from envfactory.build.lockmeta import LockMetadata

    meta = condalock_adapter.read_lock(lock).custom_metadata
    combo = LockMetadata.from_custom_metadata(meta, where=str(lock)).combo
    if not combo:
        raise UserInputError(f"{lock} names no envfactory combo", "re-lock with envfactory")
    return combo


def _conda_dirs(prefix: str, platform: Platform) -> list[str]:
    """The directories conda's own activation puts on PATH (conda/activate.py)."""
    if os_of(platform) == "windows":
        return [
            prefix,
            rf"{prefix}\Library\mingw-w64\bin",
            rf"{prefix}\Library\usr\bin",
            rf"{prefix}\Library\bin",
            rf"{prefix}\Scripts",
            rf"{prefix}\bin",
        ]
    return [f"{prefix}/bin"]


def python_executable(prefix: str, platform: Platform) -> str:
    return rf"{prefix}\python.exe" if os_of(platform) == "windows" else f"{prefix}/bin/python"


def kernel_env(facts: EnvironmentFacts) -> dict[str, str]:
    """The kernelspec ``env``: the activation plan's settings, resolved against the prefix."""
    from envfactory.activation.plan import plan_for

    plan = plan_for(load_catalog().combo(facts.combo), facts.platform)
    prefix = str(facts.prefix)

    def resolve(text: str, in_prefix: bool) -> str:
        return f"{prefix}{plan.dirsep}{text}" if in_prefix else text

    env: dict[str, str] = {"CONDA_PREFIX": prefix}
    for edit in plan.lists:
        dirs = [resolve(v.text, v.in_prefix) for v in edit.prepend]
        if edit.variable == "PATH":
            dirs = list(dict.fromkeys([*_conda_dirs(prefix, facts.platform), *dirs]))
            env["PATH"] = plan.separator.join([*dirs, "${PATH}"])
        else:
            env[edit.variable] = plan.separator.join(dirs)
    for name in plan.unset_vars:
        env[name] = ""
    for name, value in plan.set_vars:
        env[name] = resolve(value.text, value.in_prefix)
    env.update(facts.variables)
    return dict(sorted(env.items()))


def kernel_name(label: str) -> str:
    return "envfactory-" + re.sub(r"[^a-z0-9._-]+", "-", label.lower()).strip("-")


def kernel_spec(facts: EnvironmentFacts, display_name: str | None = None) -> dict[str, Any]:
    combo = load_catalog().combo(facts.combo)
    title = display_name or (
        f"{facts.label} (TensorFlow {combo.tensorflow.value}, CUDA {combo.cuda.value})"
    )
    return {
        "argv": [
            python_executable(str(facts.prefix), facts.platform),
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
        ],
        "display_name": title,
        "language": "python",
        "env": kernel_env(facts),
        "metadata": {
            "envfactory": {
                "combo": facts.combo,
                "environment": facts.environment,
                "prefix": str(facts.prefix),
            }
        },
    }


def user_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Jupyter's per-user data directory (jupyter_core.paths.jupyter_data_dir)."""
    env = os.environ if environ is None else environ
    if env.get("JUPYTER_DATA_DIR"):
        return Path(env["JUPYTER_DATA_DIR"])
    home = Path(env.get("HOME") or Path.home())
    if sys.platform.startswith("win"):
        return Path(env.get("APPDATA") or home / "AppData" / "Roaming") / "jupyter"
    if sys.platform == "darwin":
        return home / "Library" / "Jupyter"
    xdg = env.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else home / ".local" / "share") / "jupyter"


@dataclass(frozen=True)
class KernelResult:
    name: str
    path: Path
    spec: Mapping[str, Any]
    notes: tuple[str, ...]


def install_kernel(
    prefix: Path,
    target: Target = "user",
    name: str | None = None,
    display_name: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> KernelResult:
    """Write ``kernel.json`` for the environment at ``prefix`` into the user's Jupyter data
    directory (seen by every Jupyter of this user) or into ``<prefix>/share/jupyter/kernels``
    (seen by a Jupyter that runs from that environment)."""
    facts = read_facts(prefix.expanduser().absolute())
    chosen = name or kernel_name(facts.label)
    spec = kernel_spec(facts, display_name)
    base = (
        facts.prefix.joinpath(*KERNELS) if target == "env" else user_data_dir(environ) / "kernels"
    )
    path = base / chosen / "kernel.json"
    atomic_write(path, json.dumps(spec, indent=1, sort_keys=True) + "\n")
    notes = []
    site = list(facts.prefix.glob("[Ll]ib/**/site-packages/ipykernel"))
    if not site:
        notes.append(
            f"ipykernel is not installed in {facts.prefix}; the kernel starts only once it is "
            "(add 'ipykernel' to the environment's add: list and re-lock)"
        )
    return KernelResult(chosen, path, spec, tuple(notes))
