"""Activation: one plan per combo and platform, carried out by one algorithm in every shell.

The plan says which directories the environment puts first, which variables are set or unset;
the foreign-CUDA rule and the algorithm that carries the plan out and undoes it exactly live in
``envfactory/activation/core.py``, which every environment gets a copy of (its own Python runs
it). Each shell conda runs scripts in gets a stub per phase in ``activate.d`` /
``deactivate.d`` that runs the core and applies the lines it prints (docs/activation.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from envfactory import __version__
from envfactory.activation import core
from envfactory.activation.templating import render_template
from envfactory.catalog.model import Combo, Platform, os_of
from envfactory.errors import UserInputError
from envfactory.fsio import RenderedFile, atomic_write_many
from envfactory.untrusted import PLAIN_NAME, VARIABLE_NAME

Shell = Literal["sh", "csh", "fish", "xsh", "bat", "ps1"]
SHELLS: tuple[Shell, ...] = get_args(Shell)
SHELLS_BY_OS: dict[str, tuple[Shell, ...]] = {
    # conda runs .sh for bash/zsh/dash (and, through source-bash, for xonsh), .csh for
    # csh/tcsh, .fish; rattler-shell runs .xsh for xonsh; .bat for cmd, .ps1 for PowerShell.
    "linux": ("sh", "csh", "fish", "xsh"),
    "windows": ("xsh", "bat", "ps1"),
}
# The core's name for the shell each script is for (its emitters).
EMITTER: dict[Shell, str] = {
    "sh": "sh",
    "csh": "csh",
    "fish": "fish",
    "xsh": "xonsh",
    "bat": "cmd",
    "ps1": "powershell",
}
# State variable of one activation level: _ENVFACTORY_<CONDA_SHLVL> (ASCII JSON)
STATE_PREFIX = core.STATE
# A PATH undo that a deactivate.d left for the next activation (conda's switch order)
CARRY = core.CARRY
CORE_RELPATH = "etc/conda/envfactory/activation.py"
# What the stubs run (``python -I -S -c LAUNCHER FAILED DIR OP SHELL COMBO``): importing the
# core, not running it as a script, lets Python cache its compiled form in DIR/__pycache__.
# When the core cannot be imported or fails (a damaged activation.py, a bug), the hook prints
# the one line FAILED plus the exception's name instead of a traceback, exit status 1, and the
# stub changes nothing. No quotes, '%' or '!' inside: it sits in every shell's quoting as is.
LAUNCHER = (
    "import sys; m = sys.argv.pop(1); "
    "sys.excepthook = lambda t, v, b: sys.stderr.write(m + t.__name__ + chr(10)); "
    "sys.path.insert(0, sys.argv[1]); import activation; "
    "sys.exit(activation.main(sys.argv[2:]))"
)


def failed_line(phase: str, combo: str) -> str:
    """The line a stub prints when its Python cannot run the core (the exception's name
    follows)."""
    return f"envfactory: activation.py failed, so {phase} of {combo} changed nothing: "


_PRINTABLE_LINE = re.compile(r"[^\x00-\x1f\x7f]*")


def is_foreign_cuda(path: str, os_name: str, prefix: str | None = None) -> bool:
    """The foreign-CUDA rule the activation scripts apply (``doctor`` reports the same
    directories): a directory of a CUDA or cuDNN install outside ``prefix``."""
    return not core.inside(path, prefix or "", os_name) and core.foreign_cuda(path, os_name)


@dataclass(frozen=True)
class PlanValue:
    """A value a script puts somewhere: literal text, or a path inside the environment."""

    text: str
    in_prefix: bool = False

    def runtime(self) -> list[str]:
        return ["prefix" if self.in_prefix else "literal", self.text]


@dataclass(frozen=True)
class ListEdit:
    """A separator-joined list variable: what goes first (foreign entries leave it)."""

    variable: str
    prepend: tuple[PlanValue, ...]


@dataclass(frozen=True)
class ActivationPlan:
    combo: str
    platform: Platform
    separator: str  # between list entries: ":" or ";"
    dirsep: str  # inside a path: "/" or "\\"
    lists: tuple[ListEdit, ...]
    # An entry "<p><env_lib_suffix>" is another conda environment's library directory when
    # <p>/conda-meta is a directory and <p> is not CONDA_PREFIX; it leaves the list.
    env_lib_suffix: str
    set_vars: tuple[tuple[str, PlanValue], ...]
    unset_vars: tuple[str, ...]
    unset_prefixes: tuple[str, ...]

    @property
    def os(self) -> str:
        return os_of(self.platform)

    @property
    def shells(self) -> tuple[Shell, ...]:
        return SHELLS_BY_OS[self.os]

    def runtime(self) -> dict[str, Any]:
        """The plan as plain data: what the core reads (``envfactory-<combo>.json``)."""
        return {
            "format": 1,
            "combo": self.combo,
            "os": self.os,
            "sep": self.separator,
            "dirsep": self.dirsep,
            "lists": [[e.variable, [v.runtime() for v in e.prepend]] for e in self.lists],
            "env_lib_suffix": self.env_lib_suffix,
            "set": [[name, value.runtime()] for name, value in self.set_vars],
            "unset": list(self.unset_vars),
            "unset_prefixes": list(self.unset_prefixes),
        }

    @classmethod
    def from_runtime(
        cls, data: Mapping[str, Any], platform: Platform, *, where: str
    ) -> ActivationPlan:
        """The plan back from :meth:`runtime`'s data -- as a lock records it, so untrusted: every
        name is held to a plain identifier, every value to one printable line, and the data must
        be the shape ``runtime`` writes; anything else is a UserInputError naming ``where``."""

        def bad(what: str) -> UserInputError:
            return UserInputError(
                f"{where}: the recorded activation plan for {platform} {what}",
                "the lock was edited by hand or is damaged: re-lock with 'envfactory lock'",
            )

        def value(item: object) -> PlanValue:
            if (
                not isinstance(item, list)
                or len(item) != 2
                or item[0] not in ("prefix", "literal")
                or not isinstance(item[1], str)
                or not _PRINTABLE_LINE.fullmatch(item[1])
            ):
                raise bad(f"has a value that is not [prefix|literal, text]: {item!r:.80}")
            return PlanValue(item[1], in_prefix=item[0] == "prefix")

        def name(item: object) -> str:
            if not isinstance(item, str) or not VARIABLE_NAME.fullmatch(item):
                raise bad(f"has a variable name that is not an identifier: {item!r:.80}")
            return item

        windows = os_of(platform) == "windows"
        if data.get("format") != 1:
            raise bad(f"has format {data.get('format')!r}, not 1")
        combo = data.get("combo")
        if not isinstance(combo, str) or not PLAIN_NAME.fullmatch(combo):
            raise bad(f"names no plain combo: {combo!r:.80}")
        if data.get("os") != os_of(platform):
            raise bad(f"is for os {data.get('os')!r}")
        if data.get("sep") != (";" if windows else ":") or data.get("dirsep") != (
            "\\" if windows else "/"
        ):
            raise bad("has the wrong separators for the platform")
        lists, sets = data.get("lists"), data.get("set")
        unset, prefixes = data.get("unset"), data.get("unset_prefixes")
        suffix = data.get("env_lib_suffix")
        if not all(isinstance(x, list) for x in (lists, sets, unset, prefixes)):
            raise bad("is not the shape envfactory writes")
        if not isinstance(suffix, str) or not _PRINTABLE_LINE.fullmatch(suffix):
            raise bad("has a bad env_lib_suffix")
        edits = []
        for entry in lists or ():
            if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], list):
                raise bad(f"has a list edit that is not [NAME, [values]]: {entry!r:.80}")
            edits.append(ListEdit(name(entry[0]), tuple(value(v) for v in entry[1])))
        set_vars = []
        for entry in sets or ():
            if not isinstance(entry, list) or len(entry) != 2:
                raise bad(f"has a set that is not [NAME, value]: {entry!r:.80}")
            set_vars.append((name(entry[0]), value(entry[1])))
        plan = cls(
            combo=combo,
            platform=platform,
            separator=";" if windows else ":",
            dirsep="\\" if windows else "/",
            lists=tuple(edits),
            env_lib_suffix=suffix,
            set_vars=tuple(set_vars),
            unset_vars=tuple(name(n) for n in unset or ()),
            unset_prefixes=tuple(name(n) for n in prefixes or ()),
        )
        problem = recorded_plan_problem(plan)
        if problem:
            raise bad(problem)
        return plan

    def resolved(self, prefix: str) -> tuple[list[tuple[str, list[str]]], dict[str, str | None]]:
        """(list variable, directories first) pairs and {variable: value, None to unset}, with
        ``prefix`` as the environment: the core's own resolution (``kernel`` writes these)."""
        return core.targets(self.runtime(), prefix)


# What a recorded plan may hold: exactly the kinds of edits ``plan_for`` makes. The
# plan is recorded in the lock so that an old lock creates the scripts it was made with, but
# the lock's author is untrusted: a list variable such as PATH or LD_LIBRARY_PATH may only get
# directories inside the environment, and only these names may be set or unset at all, so no
# recorded plan can point a command, the loader or an interpreter outside the prefix.
RECORDABLE_LISTS = {"linux": ("PATH", "LD_LIBRARY_PATH"), "windows": ("PATH",)}
RECORDABLE_PREFIX_VALUES = ("CUDA_PATH",)  # set to a directory inside the prefix
RECORDABLE_LITERALS = {"TF_CPP_MIN_LOG_LEVEL": re.compile(r"[0-3]")}
RECORDABLE_UNSETS = ("CUDA_PATH",)
RECORDABLE_UNSET_PREFIXES = ("CUDA_PATH_V",)
ENV_LIB_SUFFIXES = {"linux": "/lib", "windows": r"\Library\bin"}
_RELATIVE_PART = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*")


def _inside(value: PlanValue, dirsep: str) -> bool:
    """A directory inside the prefix: relative, plain parts, no '.' or '..'."""
    return value.in_prefix and all(
        _RELATIVE_PART.fullmatch(part) for part in value.text.split(dirsep)
    )


def recorded_plan_problem(plan: ActivationPlan) -> str | None:
    """Why a plan read from a lock is not one envfactory would write; None when it is."""
    os_name = plan.os
    for edit in plan.lists:
        if edit.variable not in RECORDABLE_LISTS.get(os_name, ()):
            return f"edits the list {edit.variable}, which envfactory never edits"
        for value in edit.prepend:
            if not _inside(value, plan.dirsep):
                return (
                    f"puts {value.text!r:.80} first in {edit.variable}, which is not a "
                    "directory inside the environment"
                )
    for variable, value in plan.set_vars:
        if variable in RECORDABLE_PREFIX_VALUES and _inside(value, plan.dirsep):
            continue
        literal = RECORDABLE_LITERALS.get(variable)
        if literal is not None and not value.in_prefix and literal.fullmatch(value.text):
            continue
        return f"sets {variable} to {value.text!r:.80}, which envfactory never does"
    for variable in plan.unset_vars:
        if variable not in RECORDABLE_UNSETS:
            return f"unsets {variable}, which envfactory never does"
    for stem in plan.unset_prefixes:
        if stem not in RECORDABLE_UNSET_PREFIXES:
            return f"unsets the variables {stem}*, which envfactory never does"
    if plan.env_lib_suffix != ENV_LIB_SUFFIXES.get(os_name):
        return f"has the library suffix {plan.env_lib_suffix!r:.80}"
    return None


def plan_for(combo: Combo, platform: Platform) -> ActivationPlan:
    """The activation plan of ``combo`` on ``platform`` (raises if the combo does not cover it)."""
    route = combo.route(platform).route.value
    log_level = ("TF_CPP_MIN_LOG_LEVEL", PlanValue(str(combo.tf_cpp_min_log_level)))
    if os_of(platform) == "windows":
        # conda's cudatoolkit and cudnn put their DLLs in Library\bin on every Windows route.
        return ActivationPlan(
            combo=combo.name,
            platform=platform,
            separator=";",
            dirsep="\\",
            lists=(ListEdit("PATH", (PlanValue(r"Library\bin", in_prefix=True),)),),
            env_lib_suffix=r"\Library\bin",
            set_vars=(("CUDA_PATH", PlanValue("Library", in_prefix=True)), log_level),
            unset_vars=(),
            unset_prefixes=("CUDA_PATH_V",),
        )
    # Conda-built TensorFlow finds the conda CUDA libraries through its RPATH; the pip wheel on
    # conda's cudatoolkit does not, so that route puts $CONDA_PREFIX/lib first (TF #60750).
    # pip tensorflow[and-cuda] finds its nvidia-* wheels itself.
    lib = (PlanValue("lib", in_prefix=True),) if route == "conda-cuda+pip" else ()
    return ActivationPlan(
        combo=combo.name,
        platform=platform,
        separator=":",
        dirsep="/",
        lists=(ListEdit("PATH", ()), ListEdit("LD_LIBRARY_PATH", lib)),
        env_lib_suffix="/lib",
        set_vars=(log_level,),
        unset_vars=("CUDA_PATH",),
        unset_prefixes=("CUDA_PATH_V",),
    )


def script_relpath(combo: str, phase: Literal["activate", "deactivate"], shell: Shell) -> str:
    return f"etc/conda/{phase}.d/envfactory-{combo}.{shell}"


def plan_relpath(combo: str) -> str:
    """The plan the core reads (conda ignores etc/conda/envfactory)."""
    return f"etc/conda/envfactory/envfactory-{combo}.json"


def core_source() -> str:
    """The core, verbatim: the environment's Python runs exactly the module envfactory uses."""
    return Path(core.__file__).read_text(encoding="utf-8")


def _context(plan: ActivationPlan, phase: str, shell: Shell) -> dict[str, Any]:
    return {
        "version": __version__,
        "combo": plan.combo,
        "platform": plan.platform,
        "phase": phase,
        "emitter": EMITTER[shell],
        "core_relpath": CORE_RELPATH,
        "core_dir": CORE_RELPATH.rsplit("/", 1)[0],
        "launcher": LAUNCHER,
        "failed": failed_line(phase, plan.combo),
    }


def render_script(
    plan: ActivationPlan,
    shell: Shell,
    phase: Literal["activate", "deactivate"],
    templates: Path | None = None,
) -> RenderedFile:
    """One stub of ``plan``; ``templates``: a folder with ``script.<shell>.j2`` to use instead
    of the shipped ``templates/activation``."""
    name = f"activation/script.{shell}.j2"
    if templates is not None:
        name = f"script.{shell}.j2"
    content = render_template(name, _context(plan, phase, shell), templates)
    if shell == "bat":  # cmd mis-finds labels in batch files with bare LF line ends
        content = content.replace("\n", "\r\n")
    return RenderedFile(script_relpath(plan.combo, phase, shell), content)


def activation_scripts(combo: Combo, platform: Platform) -> list[RenderedFile]:
    """Every activate.d/deactivate.d stub, the plan and the core for ``combo``.

    Paths are relative to an environment prefix, sorted; contents are deterministic.
    """
    return plan_files(plan_for(combo, platform))


def plan_files(plan: ActivationPlan) -> list[RenderedFile]:
    """The stubs, the plan and the core that carry out ``plan`` (from the catalog, or as a
    lock recorded it)."""
    files = [RenderedFile(CORE_RELPATH, core_source())]
    plan_json = json.dumps(plan.runtime(), sort_keys=True, ensure_ascii=True)
    files.append(RenderedFile(plan_relpath(plan.combo), plan_json + "\n"))
    for shell in plan.shells:
        files.append(render_script(plan, shell, "activate"))
        files.append(render_script(plan, shell, "deactivate"))
    return sorted(files, key=lambda f: f.relpath)


def install_activation(prefix: Path, combo: Combo, platform: Platform) -> list[Path]:
    """Write the activation files of the catalog's ``combo`` into ``prefix``."""
    return install_plan(prefix, plan_for(combo, platform))


def install_plan(prefix: Path, plan: ActivationPlan) -> list[Path]:
    """Write the activation files of ``plan`` into ``prefix`` atomically; return the paths."""
    files = plan_files(plan)
    targets = [(prefix / f.relpath, f.content) for f in files]
    atomic_write_many(targets)
    return [path for path, _ in targets]
