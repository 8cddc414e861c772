"""Activation: one plan per combo and platform, rendered for every shell conda runs scripts in.

The plan says which directories the environment puts first, which foreign CUDA entries leave
PATH (and LD_LIBRARY_PATH), and which variables are set or unset. The scripts carry it out and
record what they changed so the matching deactivate script can undo exactly that.

The algorithm (written once in Python in ``templates/activation/envfactory_core.py``, which the
xonsh scripts include verbatim and the tests run as the reference; the awk program behind the
sh/csh/fish scripts, the JScript program behind the cmd scripts and the PowerShell scripts
follow it step by step)::

    level = CONDA_SHLVL if it is a number else "0"       # one state slot per stacking level
    key   = "_ENVFACTORY_<level>_"

    activate(env):
        if key+"COMBO" in env: env = deactivate(env)      # reactivation: undo, then redo
        for each list variable V (PATH, LD_LIBRARY_PATH):
            WAS = unset | empty | set                      # "" and unset come back as they were
            kept, removed = [], []
            for entry in V.split(sep):                     # empty entries are entries
                if foreign(entry): removed.append((entry, index of the next kept entry))
                else: kept.append(entry)
            for each removed entry r, followed in the original list by kept entry k:
                ANCHOR = k; OCC = how many kept entries equal to k come after k
                (no kept entry after r: OCC = "end")
            ADDED = the plan's directories for V, resolved against CONDA_PREFIX
            V = ADDED + kept                               # unset when that is empty
        for each scalar S the plan sets or unsets (TF_CPP_MIN_LOG_LEVEL, CUDA_PATH,
                every CUDA_PATH_V*): record OLD (if it was set) and NEW (if we set it)

    deactivate(env):                                       # works on the *current* values
        for each list variable V recorded at this level:
            entries = V.split(sep)
            drop the first occurrence of each ADDED entry
            for each removed entry, in its original order:
                if OCC == "end": append it
                else: insert it before the kept entry equal to ANCHOR that has OCC equal
                      entries after it (counted from the end; not found: append)
            V = join(entries), or "" / unset as WAS says when nothing is left
        for each scalar S: if S still holds NEW (or is still unset), give it back OLD
        unset every key+* variable

Why this shape: conda exports the recomputed PATH *before* running deactivate.d on ``conda
deactivate`` and *after* it on a switch A -> B, and it drops its own block of environment
directories from the front; a snapshot would re-insert the old environment's block, so the
deactivate script applies the inverse edit to whatever PATH it finds. Anchors are counted from
the end because everything that changes PATH between the two scripts (conda's block, the
user's ``PATH=x:$PATH``) happens at the front. Entries the user added stay; entries the user
removed stay removed. Values the user changed after activating are theirs and stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from envfactory import __version__
from envfactory.catalog.model import Combo, Platform, os_of
from envfactory.fsio import RenderedFile, atomic_write_many
from envfactory.templating import render_template, templates_dir

Shell = Literal["sh", "csh", "fish", "xsh", "bat", "ps1"]
SHELLS: tuple[Shell, ...] = get_args(Shell)
SHELLS_BY_OS: dict[str, tuple[Shell, ...]] = {
    # conda runs .sh for bash/zsh/dash, .csh for csh/tcsh, .fish, .xsh for xonsh (rattler);
    # .bat for cmd, .ps1 for PowerShell. A Linux plan in a .bat would only be dead code.
    "linux": ("sh", "csh", "fish", "xsh"),
    # Windows: the .bat runs etc/conda/envfactory/envfactory-<combo>.js with cscript, which
    # computes the change and writes it as `set` lines (tests/test_activation_bat.py, in wine).
    # The .ps1 is syntax-checked (tree-sitter-powershell) and its logic run in a model of
    # PowerShell (tests/test_activation_ps1.py), never in pwsh: none is installable here.
    "windows": ("xsh", "bat", "ps1"),
}
# State variables of one activation level: _ENVFACTORY_<CONDA_SHLVL>_...
STATE_PREFIX = "_ENVFACTORY_"

# Where foreign CUDA toolkits put themselves on PATH. Sources: NVIDIA's Windows installer
# (C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\vX.Y\bin and \libnvvp, plus CUDA_PATH and
# CUDA_PATH_VX_Y), TensorFlow's old Windows install guide (C:\tools\cuda\bin), NVIDIA's Linux
# post-install steps (/usr/local/cuda-X.Y/bin, lib64 on LD_LIBRARY_PATH; Arch: /opt/cuda).
WINDOWS_FOREIGN = (
    r"*\NVIDIA GPU Computing Toolkit\CUDA\v*\bin",
    r"*\NVIDIA GPU Computing Toolkit\CUDA\v*\libnvvp",
    r"C:\tools\cuda\bin",
)
LINUX_FOREIGN = tuple(
    f"{root}*/{leaf}"
    for root in ("/usr/local/cuda", "/opt/cuda")
    for leaf in ("bin", "lib64", "lib")
)


@dataclass(frozen=True)
class PlanValue:
    """A value a script puts somewhere: literal text, or a path inside the environment."""

    text: str
    in_prefix: bool = False

    def runtime(self) -> tuple[str, str]:
        return ("prefix" if self.in_prefix else "literal", self.text)


@dataclass(frozen=True)
class ListEdit:
    """A separator-joined list variable: what goes first, and that foreign entries leave it."""

    variable: str
    prepend: tuple[PlanValue, ...]


@dataclass(frozen=True)
class ActivationPlan:
    combo: str
    platform: Platform
    separator: str  # between list entries: ":" or ";"
    dirsep: str  # inside a path: "/" or "\\"
    fold_case: bool  # Windows compares paths case-insensitively
    lists: tuple[ListEdit, ...]
    foreign_patterns: tuple[str, ...]  # "*" globs, "*" matching the separator too
    # An entry "<p><env_lib_suffix>" is another conda environment's library directory when
    # <p>/conda-meta is a directory and <p> is not CONDA_PREFIX; it leaves the list.
    env_lib_suffix: str
    set_vars: tuple[tuple[str, PlanValue], ...]
    unset_vars: tuple[str, ...]
    unset_prefixes: tuple[str, ...]

    @property
    def shells(self) -> tuple[Shell, ...]:
        return SHELLS_BY_OS[os_of(self.platform)]

    def runtime(self) -> dict[str, Any]:
        """The plan as plain data, the shape ``envfactory_core.py`` reads."""
        return {
            "combo": self.combo,
            "sep": self.separator,
            "dirsep": self.dirsep,
            "fold_case": self.fold_case,
            "lists": [(e.variable, [v.runtime() for v in e.prepend]) for e in self.lists],
            "patterns": list(self.foreign_patterns),
            "env_lib_suffix": self.env_lib_suffix,
            "set": [(name, value.runtime()) for name, value in self.set_vars],
            "unset": list(self.unset_vars),
            "unset_prefixes": list(self.unset_prefixes),
        }


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
            fold_case=True,
            lists=(ListEdit("PATH", (PlanValue(r"Library\bin", in_prefix=True),)),),
            foreign_patterns=WINDOWS_FOREIGN,
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
        fold_case=False,
        lists=(ListEdit("PATH", ()), ListEdit("LD_LIBRARY_PATH", lib)),
        foreign_patterns=LINUX_FOREIGN,
        env_lib_suffix="/lib",
        set_vars=(log_level,),
        unset_vars=("CUDA_PATH",),
        unset_prefixes=("CUDA_PATH_V",),
    )


def script_relpath(combo: str, phase: Literal["activate", "deactivate"], shell: Shell) -> str:
    return f"etc/conda/{phase}.d/envfactory-{combo}.{shell}"


def awk_relpath(combo: str) -> str:
    """The awk program the sh, csh and fish scripts share (conda ignores this directory)."""
    return f"etc/conda/envfactory/envfactory-{combo}.awk"


def js_relpath(combo: str) -> str:
    """The program the .bat scripts run with Windows Script Host (conda ignores this folder)."""
    return f"etc/conda/envfactory/envfactory-{combo}.js"


def _context(plan: ActivationPlan, phase: str, shell: str) -> dict[str, Any]:
    core = (templates_dir() / "activation" / "envfactory_core.py").read_text(encoding="utf-8")
    return {
        "version": __version__,
        "combo": plan.combo,
        "platform": plan.platform,
        "phase": phase,
        "plan": plan,
        "runtime": plan.runtime(),
        "awk_relpath": awk_relpath(plan.combo),
        "core_source": core,
        "state_prefix": STATE_PREFIX,
    }


def render_script(
    plan: ActivationPlan,
    shell: Shell,
    phase: Literal["activate", "deactivate"],
    templates: Path | None = None,
) -> RenderedFile:
    """One script of ``plan``; ``templates``: a folder with ``script.<shell>.j2`` to use instead
    of the shipped ``templates/activation``."""
    name = f"activation/script.{shell}.j2"
    if templates is not None:
        name = f"script.{shell}.j2"
    content = render_template(name, _context(plan, phase, shell), templates)
    if shell == "bat":  # cmd mis-finds labels in batch files with bare LF line ends
        content = content.replace("\n", "\r\n")
    return RenderedFile(script_relpath(plan.combo, phase, shell), content)


def activation_scripts(combo: Combo, platform: Platform) -> list[RenderedFile]:
    """Every activate.d/deactivate.d script (and the shared awk program) for ``combo``.

    Paths are relative to an environment prefix, sorted; contents are deterministic.
    """
    plan = plan_for(combo, platform)
    files: list[RenderedFile] = []
    for shell in plan.shells:
        files.append(render_script(plan, shell, "activate"))
        files.append(render_script(plan, shell, "deactivate"))
    if os_of(platform) == "linux":
        content = render_template("activation/envfactory.awk.j2", _context(plan, "both", "awk"))
        files.append(RenderedFile(awk_relpath(plan.combo), content))
    if "bat" in plan.shells:
        content = render_template("activation/envfactory.js.j2", _context(plan, "both", "js"))
        files.append(RenderedFile(js_relpath(plan.combo), content))
    return sorted(files, key=lambda f: f.relpath)


def install_activation(prefix: Path, combo: Combo, platform: Platform) -> list[Path]:
    """Write the activation scripts into ``prefix`` atomically; return the paths written."""
    files = activation_scripts(combo, platform)
    targets = [(prefix / f.relpath, f.content) for f in files]
    atomic_write_many(targets)
    return [path for path, _ in targets]


def scripts_by_shell(files: Sequence[RenderedFile]) -> dict[str, RenderedFile]:
    """``{"activate.sh": file, ...}``: a lookup for callers that want one script."""
    out: dict[str, RenderedFile] = {}
    for f in files:
        phase = f.relpath.split("/")[2].removesuffix(".d")
        out[f"{phase}.{f.relpath.rsplit('.', 1)[1]}"] = f
    return out
