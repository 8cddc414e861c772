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
from typing import TYPE_CHECKING, Any, Literal, cast

from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import PLATFORMS, Platform, os_of
from envfactory.errors import UserInputError
from envfactory.fsio import atomic_write

if TYPE_CHECKING:
    from envfactory.activation.plan import ActivationPlan

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
    from envfactory import untrusted
    from envfactory.install.create import MARKER

    marker = prefix / "conda-meta" / MARKER
    if not marker.is_file():
        raise UserInputError(
            f"{prefix} was not created by envfactory (no conda-meta/{MARKER})",
            "create it with 'envfactory create', or pass the prefix of one that was",
        )
    recorded = untrusted.parse_marker(_read(marker), str(marker), PLATFORMS)
    combo = recorded.get("combo") or _combo_from_lock(Path(recorded["lock"]))
    state = prefix / "conda-meta" / "state"
    variables: dict[str, str] = {}
    if state.is_file():
        variables = untrusted.parse_state_variables(_read(state), str(state))
    return EnvironmentFacts(
        prefix=prefix,
        combo=combo,
        platform=cast(Platform, recorded["platform"]),
        environment=recorded.get("environment"),
        variables=variables,
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserInputError(
            f"{path} is not UTF-8", "recreate the environment with 'envfactory create --force'"
        ) from None


def _combo_from_lock(lock: Path) -> str:
    from envfactory.lockfile.read import read_lock

    combo = read_lock(lock).metadata.combo
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
    plan = installed_plan(facts)
    prefix = str(facts.prefix)
    lists, wanted = plan.resolved(prefix)  # the core's own resolution of the plan
    # Every value is written literally (``$`` doubled) but the one ``${PATH}`` that asks
    # jupyter_client for the server's PATH: a prefix or a variable holding ``$HOME`` or
    # ``${PATH}`` must reach the kernel as it is.
    env: dict[str, str] = {"CONDA_PREFIX": literal(prefix)}
    for variable, dirs in lists:
        if variable == "PATH":
            conda = [literal(d) for d in _conda_dirs(prefix, facts.platform)]
            dirs = list(dict.fromkeys([*conda, *(literal(d) for d in dirs)]))
            env["PATH"] = plan.separator.join([*dirs, "${PATH}"])
        else:
            env[variable] = plan.separator.join(literal(d) for d in dirs)
    for name, value in wanted.items():
        # "": the nearest a kernelspec comes to unsetting
        env[name] = "" if value is None else literal(value)
    env.update({name: literal(value) for name, value in facts.variables.items()})
    return dict(sorted(env.items()))


def kernel_name(label: str) -> str:
    return "envfactory-" + re.sub(r"[^a-z0-9._-]+", "-", label.lower()).strip("-.")


def check_kernel_name(name: str) -> None:
    """A kernel name becomes a directory under the kernels dir: a plain name only
    (jupyter_client accepts ``[a-z0-9._-]+``, case-insensitive; no separator, no '..')."""
    from envfactory import untrusted

    if not untrusted.PLAIN_NAME.fullmatch(name):
        raise UserInputError(
            f"kernel name {name!r} is not a plain name",
            "use letters, digits, '.', '_' and '-', starting with a letter or digit "
            "(it names a directory under Jupyter's kernels/)",
        )


# jupyter_client's KernelManager.format_kernel_cmd replaces ``{NAME}`` in argv when NAME is
# connection_file, prefix, resource_dir or one of start_kernel's keyword arguments (all lower
# case); there is no escape for it. ``{PATH}`` and other upper-case names are left alone.
_ARGV_FIELD = re.compile(r"\{[a-z_][a-z0-9_]*\}")


def literal(value: str) -> str:
    """``value`` as jupyter_client's ``string.Template.safe_substitute`` of a kernelspec's
    ``env`` gives it back unchanged: every ``$`` doubled."""
    return value.replace("$", "$$")


def installed_plan(facts: EnvironmentFacts) -> ActivationPlan:
    """The plan ``create`` installed into the prefix (from the lock), which is what the
    environment's own activation carries out; the catalog's plan only for a prefix that has
    none installed."""
    from envfactory.activation.plan import ActivationPlan, plan_for, plan_relpath

    path = facts.prefix / plan_relpath(facts.combo)
    if not path.is_file():
        # the lock's record names the plan's own combo, which may differ from the lock's (a
        # combo renamed since): the one plan create installed is the one to read
        installed = sorted(path.parent.glob("envfactory-*.json"))
        path = installed[0] if len(installed) == 1 else path
    if path.is_file():
        try:
            data = json.loads(_read(path))
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise UserInputError(
                f"{path} is not the JSON plan envfactory installs",
                "re-create the environment with 'envfactory create --force'",
            )
        return ActivationPlan.from_runtime(data, facts.platform, where=str(path))
    return plan_for(load_catalog().combo(facts.combo), facts.platform)


def kernel_spec(facts: EnvironmentFacts, display_name: str | None = None) -> dict[str, Any]:
    catalog = load_catalog()
    title = display_name or facts.label
    if display_name is None and facts.combo in catalog.combos:
        combo = catalog.combo(facts.combo)
        title = f"{facts.label} (TensorFlow {combo.tensorflow.value}, CUDA {combo.cuda.value})"
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


def _check_argv(facts: EnvironmentFacts) -> None:
    field = _ARGV_FIELD.search(str(facts.prefix))
    if field:
        raise UserInputError(
            f"the prefix {facts.prefix} contains {field.group()}, which jupyter_client "
            "replaces in a kernel's command line (it cannot be escaped)",
            "create the environment under a path without '{NAME}' in it",
        )


def _owner(path: Path) -> str | None:
    """The prefix an existing kernel.json was written for by envfactory; '' when envfactory did
    not write it (or it cannot be read); None when there is no kernel.json."""
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink():
        return ""
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
        prefix = spec["metadata"]["envfactory"]["prefix"]
    except (OSError, ValueError, TypeError, KeyError):
        return ""
    return prefix if isinstance(prefix, str) else ""


@dataclass(frozen=True)
class KernelResult:
    name: str
    path: Path
    spec: Mapping[str, Any]
    notes: tuple[str, ...]


def install_kernel(
    prefix: Path,
    *,
    target: Target = "user",
    name: str | None = None,
    display_name: str | None = None,
    environ: Mapping[str, str] | None = None,
    replace: bool = False,
) -> KernelResult:
    """Write ``kernel.json`` for the environment at ``prefix`` into the user's Jupyter data
    directory (seen by every Jupyter of this user) or into ``<prefix>/share/jupyter/kernels``
    (seen by a Jupyter that runs from that environment).

    A kernel.json already there is replaced only when envfactory wrote it for this same
    prefix, or with ``replace``: a user's ``python3`` kernel, or the kernel of another prefix
    of the same combo, is never overwritten silently."""
    facts = read_facts(prefix.expanduser().absolute())
    chosen = name if name is not None else kernel_name(facts.label)
    check_kernel_name(chosen)
    _check_argv(facts)
    spec = kernel_spec(facts, display_name)
    base = (
        facts.prefix.joinpath(*KERNELS) if target == "env" else user_data_dir(environ) / "kernels"
    )
    path = base / chosen / "kernel.json"
    if target == "env":
        # the prefix is untrusted (a package may have installed share/jupyter as a link):
        # every directory down to the kernel's must be a real one, made here if missing
        from envfactory.ownfiles import real_directories

        real_directories(facts.prefix, "/".join((*KERNELS, chosen)))
    owner = _owner(path)
    if owner is not None and owner != str(facts.prefix) and not replace:
        whose = f"envfactory wrote it for {owner}" if owner else "envfactory did not write it"
        raise UserInputError(
            f"a kernel named {chosen} exists already ({path}; {whose})",
            "pick another name with --name, or overwrite it with --replace",
        )
    atomic_write(path, json.dumps(spec, indent=1, sort_keys=True) + "\n")
    notes = []
    site = list(facts.prefix.glob("[Ll]ib/**/site-packages/ipykernel"))
    if not site:
        notes.append(
            f"ipykernel is not installed in {facts.prefix}; the kernel starts only once it is "
            "(add 'ipykernel' to the environment's add: list and re-lock)"
        )
    return KernelResult(chosen, path, spec, tuple(notes))
