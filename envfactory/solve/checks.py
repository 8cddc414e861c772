"""Solve stage: the locked packages of one platform, and the checks a solution must pass before
it becomes a lock: exact pins where a package selects a variant, so a CPU TensorFlow build
or a CUDA outside the combo is refused.

Everything here is pure over ``LockedPackage`` records; the solver itself sits behind
``rattler_adapter`` and version matching is passed in as a function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from envfactory.errors import ToolError
from envfactory.lockfile.models import LockedPackage, dependency_name

if TYPE_CHECKING:  # render pulls in activation, templates and the catalog loader: create needs none
    from envfactory.catalog.model import CondaPin, Constraint  # create needs no catalog model
    from envfactory.render.environment import EnvironmentSpec

# TensorFlow builds that run without a GPU: Anaconda's mkl_/eigen_ variants, conda-forge's cpu_.
CPU_BUILD = re.compile(r"(^|_)(cpu|mkl|eigen)(_|py|$)")
TENSORFLOW_CONDA = ("tensorflow", "tensorflow-base", "tensorflow-gpu", "_tflow_select")
CPU_WHEELS = ("tensorflow-cpu", "tensorflow-intel", "tensorflow-cpu-aws")
# conda-forge's convention for packages built in CPU and GPU variants (pytorch, jaxlib,
# tensorflow, onnxruntime, ...): the CPU build's string says cpu (cpu_py310h..., py310_cpu_0),
# the GPU build's says cuda. In a GPU combo any conda package built as 'cpu' is the wrong variant.
CPU_VARIANT = re.compile(r"(^|_)cpu(_|py|$)")
# pip distributions that are CPU-only unless a CUDA companion is locked beside them.
CPU_UNLESS = {"jaxlib": ("jax-cuda11-plugin", "jax-cuda12-plugin", "jax-cuda13-plugin")}


Matcher = Callable[[str, LockedPackage], bool]


def _version_matches(found: str, pinned: str) -> bool:
    """conda's ``name=1.16.4`` means 1.16.4 or 1.16.4.*; a pin never matches 1.16.40."""
    return found == pinned or found.startswith(pinned + ".")


class Problem(NamedTuple):
    package: str
    found: str
    expected: str

    def __str__(self) -> str:
        return f"{self.package}: found {self.found}, expected {self.expected}"


def _pin_problems(pin: CondaPin, found: Sequence[LockedPackage]) -> list[Problem]:
    expected = pin.spec.split("=", 1)[1].replace("=", " ")
    if not found:
        return [Problem(pin.name, "nothing (not in the solution)", expected)]
    out = []
    for pkg in found:
        if not _version_matches(pkg.version, pin.version) or (
            pin.build and not _build_matches(pkg.build, pin.build)
        ):
            out.append(Problem(pin.name, f"{pkg.version} {pkg.build}", expected))
    return out


def _build_matches(build: str, pattern: str) -> bool:
    regex = "^" + ".*".join(re.escape(p) for p in pattern.split("*")) + "$"
    return re.match(regex, build) is not None


def check_solution(
    spec: EnvironmentSpec,
    packages: Sequence[LockedPackage],
    matches: Matcher,
    with_pip: bool = False,
    requested: Collection[str] = (),
) -> list[Problem]:
    """Everything wrong with a solution for ``spec``; empty when it may be locked.

    * no CPU/mkl/eigen TensorFlow build, conda or pip;
    * the GPU TensorFlow the route promises is there (a gpu/cuda conda build, or the pip wheel);
    * cudatoolkit, cudnn, python and numpy are the combo's (versions, and builds where pinned),
      also when a pin is unconfirmed and carries no build string;
    * every dependency of every conda package is satisfied by a package of the same lock.

    ``with_pip`` says the pip part is locked too, so a missing TensorFlow wheel is a problem.
    ``requested`` names the pip packages asked for (the combo's and a project's): one that is
    CPU-only unless a CUDA companion is locked (jaxlib) is refused only when asked for, not when
    it comes in as a dependency (TF 2.12 requires jax, which brings a CPU jaxlib it never uses
    for the GPU).
    """
    conda = [p for p in packages if p.manager == "conda"]
    by_name: dict[str, list[LockedPackage]] = {}
    for pkg in conda:
        by_name.setdefault(pkg.name, []).append(pkg)
    problems: list[Problem] = []

    for pkg in conda:
        if pkg.name in TENSORFLOW_CONDA and CPU_BUILD.search(pkg.build):
            problems.append(
                Problem(pkg.name, f"{pkg.version} {pkg.build} (a CPU build)", "a GPU build")
            )
    for pkg in conda:
        if pkg.name not in TENSORFLOW_CONDA and CPU_VARIANT.search(pkg.build):
            problems.append(
                Problem(pkg.name, f"{pkg.version} {pkg.build} (a CPU build)", "a GPU/CUDA build")
            )
    pip_names = {p.name for p in packages if p.manager == "pip"}
    for pkg in packages:
        if pkg.manager != "pip":
            continue
        if pkg.name in CPU_WHEELS or pkg.version.endswith("+cpu"):
            problems.append(Problem(pkg.name, f"{pkg.version} (pip, CPU only)", "a GPU wheel"))
        companions = CPU_UNLESS.get(pkg.name)
        asked = pkg.name in requested
        if companions and asked and not pip_names.intersection(companions):
            problems.append(
                Problem(
                    pkg.name,
                    f"{pkg.version} (pip, CPU only without {' or '.join(companions)})",
                    "a GPU wheel",
                )
            )
    problems += constraint_problems(spec.combo.constraints_for(spec.platform), packages)

    route = spec.combo.route(spec.platform).route.value
    tf_version = spec.combo.tensorflow.value
    if route == "conda":
        gpu = [
            p
            for p in conda
            if p.name in ("tensorflow-base", "tensorflow")
            and p.version == tf_version
            and not CPU_BUILD.search(p.build)
            and re.search(r"gpu|cuda", p.build)
        ]
        if not gpu:
            found = ", ".join(p.describe() for p in conda if p.name.startswith("tensorflow"))
            problems.append(
                Problem("tensorflow-base", found or "nothing", f"a GPU build of {tf_version}")
            )
    elif with_pip:
        wanted = [r.name for r in spec.pip if r.name.startswith("tensorflow")]
        pip_names = {p.name for p in packages if p.manager == "pip"}
        for name in wanted:
            if name not in pip_names:
                problems.append(Problem(name, "nothing (not in the solution)", f"pip {tf_version}"))

    for pin in spec.conda:
        if pin.name in ("cudatoolkit", "cudnn", "numpy", "python") or pin.name in TENSORFLOW_CONDA:
            problems += _pin_problems(pin, by_name.get(pin.name, []))
    for pkg in by_name.get("python", []):
        if not _version_matches(pkg.version, spec.python):
            problems.append(Problem("python", pkg.version, f"{spec.python}.*"))
    for pkg in by_name.get("cudatoolkit", []):
        if not pkg.version.startswith(spec.combo.cuda.value.split(".")[0] + "."):
            problems.append(Problem("cudatoolkit", pkg.version, f"CUDA {spec.combo.cuda.value}"))

    problems += closure_problems(conda, matches)
    return problems


def constraint_problems(
    constraints: Sequence[Constraint], packages: Sequence[LockedPackage]
) -> list[Problem]:
    """Locked packages outside a companion constraint of the combo (conda or pip side)."""
    out = []
    for pkg in packages:
        for c in constraints:
            if pkg.name in c.names() and not c.allows(pkg.version):
                where = (
                    f"{pkg.version} {pkg.build}".strip()
                    if pkg.manager == "conda"
                    else (f"{pkg.version} (pip)")
                )
                state = "" if c.confirmed else ", unconfirmed"
                out.append(
                    Problem(
                        pkg.name,
                        where,
                        f"{c.package}{c.spec} (companion constraint of TF {c.tensorflow}, "
                        f"sources: {', '.join(c.sources)}{state})",
                    )
                )
    return out


def closure_problems(conda: Sequence[LockedPackage], matches: Matcher) -> list[Problem]:
    """Dependencies not satisfied inside the lock (virtual ``__`` packages excepted)."""
    by_name: dict[str, list[LockedPackage]] = {}
    for pkg in conda:
        by_name.setdefault(pkg.name, []).append(pkg)
    out = []
    for pkg in sorted(conda, key=lambda p: p.name):
        for dep in pkg.depends:
            name = dependency_name(dep)
            if name.startswith("__"):
                continue
            candidates = by_name.get(name, [])
            if not any(matches(dep, c) for c in candidates):
                found = ", ".join(c.describe() for c in candidates) or "nothing in the lock"
                out.append(Problem(name, found, f"'{dep}' (needed by {pkg.name})"))
    return out


def refuse(combo: str, platform: str, problems: Iterable[Problem]) -> ToolError:
    lines = "\n  ".join(str(p) for p in problems)
    return ToolError(
        f"the solution for {combo} on {platform} was refused:\n  {lines}",
        "the channels offer a package the combo does not allow; check the channel map "
        "(--channel-map) points at the right channel, or see 'envfactory show " + combo + "'",
    )


def absent_names(message: str) -> list[str]:
    """Packages a solver's explanation says it found no candidates for."""
    absent = re.findall(r"No candidates were found for ([^\s.]+)", message)
    absent += re.findall(r"([\w.-]+) [^\n]*, for which no candidates were found", message)
    return list(dict.fromkeys(absent))


def solver_hint(
    message: str,
    virtual_packages: Mapping[str, str],
    offered: Mapping[str, Sequence[str]] | None = None,
    wanted: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """A plain-words next step for a solver's 'no solution' explanation. ``offered`` holds the
    versions the channels do have of a package the solver found no candidates for, ``wanted``
    the specs that asked for it and whose they are; together they say which spec excludes what
    the channels offer, instead of 'no channel offers X'."""
    missing_virtual = sorted(set(re.findall(r"(__\w+)[^\n]*no candidates", message)))
    if missing_virtual:
        have = ", ".join(f"{k}={v}" for k, v in virtual_packages.items()) or "none"
        return (
            f"a package needs the virtual package(s) {', '.join(missing_virtual)}, which the "
            f"lock's assumptions ({have}) do not provide or do not satisfy; lock with the "
            "combo's own virtual packages (drop --virtual-package-spec) or pick a combo whose "
            "CUDA matches"
        )
    absent = absent_names(message)
    offered = offered or {}
    excluded = [n for n in absent if offered.get(n)]
    if excluded:
        lines = []
        for name in excluded:
            versions = list(offered[name])
            shown = ("... " if len(versions) > 8 else "") + ", ".join(versions[-8:])
            asks = "; ".join((wanted or {}).get(name, [])) or "a dependency"
            lines.append(f"the channels offer {name} {shown}, but {asks} excludes them")
        return (
            "; ".join(lines)
            + "; change that spec, or point the channel map (--channel-map NAME=URL) at a channel "
            "that holds the version asked for"
        )
    if absent:
        return (
            f"no channel offers {', '.join(absent)}; check the channel map "
            "(--channel-map NAME=URL) points at a channel or mirror that holds it"
        )
    return (
        "two pins cannot hold together; see 'envfactory show COMBO' for the pins and their "
        "sources, and check the channel map points at the intended channels"
    )
