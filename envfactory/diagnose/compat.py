"""Will a combo run on this GPU, with this driver, on this platform? Pure: probes nothing.

The verdict is decided in this order (the first that applies wins):

``platform-unsupported``
    the combo has no route for the platform (TF >= 2.11 GPU on native Windows).
``driver-too-old``
    the driver is below the combo's minimum for the OS. Each route says which of NVIDIA's two
    thresholds it uses: the driver its CUDA toolkit ships with (``toolkit``; CUDA 10.x has no
    other), or the minor-version-compatibility floor (CUDA 11.x >= 450.80.02 / 452.39, 12.x >=
    525.60.13). A GPU that needs PTX JIT needs the toolkit's own driver even on the floor route:
    NVIDIA's minor-version compatibility does not cover JIT of PTX from a newer toolkit.
``gpu-too-new``
    the GPU's architecture (major compute capability) is newer than the newest the toolkit
    compiles for (RTX 30xx, 8.6, on CUDA 10.0, max 7.5; H100/H200, 9.0, on CUDA 11.2, max 8.6).
``gpu-too-old``
    the GPU is older than the oldest architecture the toolkit or the build carries, or the build
    has neither SASS for its major nor PTX at or below it (TF 2.3 on compute capability 5.0).
``supported``
    the build carries SASS of the same major with a minor not above the GPU's: native kernels.
``ptx-jit``
    otherwise the build carries PTX for a capability not above the GPU's: it runs after the
    driver JIT-compiles it (a slow first start).

Sources: NVIDIA CUDA C Programming Guide, "Binary Compatibility" and "PTX Compatibility" (a cubin
for X.y runs on X.z with z >= y; PTX runs on any equal or higher capability); the catalog's
toolkit and GPU-target records (envfactory/data/toolkits.yaml, gpu-targets.yaml, each fact
with its source in sources.yaml).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from envfactory.catalog.gpus import Capability, parse_capability
from envfactory.catalog.model import Catalog, Combo, GpuTargets, Platform, Toolkit, os_of
from envfactory.errors import UserInputError

Verdict = Literal[
    "platform-unsupported", "driver-too-old", "gpu-too-new", "gpu-too-old", "supported", "ptx-jit"
]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
RUNNABLE: frozenset[Verdict] = frozenset({"supported", "ptx-jit"})

# How to keep the JIT result between runs (NVIDIA CUDA Programming Guide, "Just-in-Time
# Compilation" and the CUDA_CACHE_* environment variables).
JIT_CACHE_ADVICE = (
    "keep the JIT cache between runs: leave CUDA_CACHE_DISABLE unset, point CUDA_CACHE_PATH at a "
    "persistent disk (default ~/.nv/ComputeCache, on Windows %APPDATA%\\NVIDIA\\ComputeCache) and "
    "raise CUDA_CACHE_MAXSIZE (up to 4294967296 bytes) so TensorFlow's kernels fit"
)


@dataclass(frozen=True, order=True)
class DriverVersion:
    """An NVIDIA driver version such as 580.159.04, ordered numerically part by part."""

    parts: tuple[int, ...]
    text: str

    def __str__(self) -> str:
        return self.text


def parse_driver(text: str) -> DriverVersion:
    """``"411.31"`` -> DriverVersion((411, 31), "411.31"); a bad value is a UserInputError."""
    value = text.strip()
    if not re.fullmatch(r"\d+(\.\d+){0,3}", value):
        raise UserInputError(
            f"'{text}' is not an NVIDIA driver version",
            "give it as nvidia-smi prints it, e.g. --driver 535.104.05",
        )
    return DriverVersion(tuple(int(p) for p in value.split(".")), value)


@dataclass(frozen=True)
class GpuSpec:
    """The GPU being checked: its compute capability and, when known, its name."""

    cc: Capability
    name: str | None = None

    def describe(self) -> str:
        return (
            f"{self.name} (compute capability {self.cc})"
            if self.name
            else f"a GPU of compute capability {self.cc}"
        )


@dataclass(frozen=True)
class Fix:
    """What to use instead: a combo that runs there, a driver to install, or both."""

    text: str
    combo: str | None = None
    driver: str | None = None


@dataclass(frozen=True)
class Assessment:
    verdict: Verdict
    reasons: tuple[str, ...]
    needed_driver: str | None = None


@dataclass(frozen=True)
class CompatResult:
    combo: str
    platform: Platform
    gpu: GpuSpec
    driver: DriverVersion | None
    verdict: Verdict
    reasons: tuple[str, ...]
    fix: Fix | None

    @property
    def runnable(self) -> bool:
        return self.verdict in RUNNABLE

    def to_json(self) -> dict[str, Any]:
        """``{"combo", "platform", "gpu": {"name", "cc"}, "driver", "verdict", "runnable",
        "reasons": [sentences, in the order they were decided], "fix": null | {"text", "combo",
        "driver"}}``. Keys are always present; absent values are null."""
        return {
            "combo": self.combo,
            "platform": self.platform,
            "gpu": {"name": self.gpu.name, "cc": str(self.gpu.cc)},
            "driver": str(self.driver) if self.driver else None,
            "verdict": self.verdict,
            "runnable": self.runnable,
            "reasons": list(self.reasons),
            "fix": (
                {"text": self.fix.text, "combo": self.fix.combo, "driver": self.fix.driver}
                if self.fix
                else None
            ),
        }


def _cap(text: str) -> Capability:
    return parse_capability(text)


def _caps(values: Iterable[str]) -> list[Capability]:
    return sorted(_cap(v) for v in values)


def _sm_list(caps: Sequence[Capability], prefix: str) -> str:
    return ", ".join(f"{prefix}_{c.sm}" for c in caps) or "none"


def _cuda_series(toolkit: Toolkit) -> str:
    return f"{toolkit.version.split('.')[0]}.x"


def _targets_caveat(targets: GpuTargets) -> str | None:
    if targets.confirmed:
        return None
    return (
        f"the build's SASS/PTX list ({targets.id}) is not confirmed: {targets.note or 'inferred'}"
    )


def _driver_reason(combo: Combo, platform: Platform, driver: DriverVersion) -> str:
    route = combo.platforms[platform]
    toolkit = combo.toolkit
    os_name = os_of(platform)
    minimum = route.min_driver.value
    if route.driver_threshold == "toolkit":
        if toolkit.compat_floor is None:
            why = f"CUDA {_cuda_series(toolkit)} has no minor-version compatibility"
        else:
            why = (
                f"this combo uses the toolkit's own minimum, not the CUDA {_cuda_series(toolkit)} "
                f"compatibility floor {toolkit.compat_floor[os_name]}"
                + (f": {toolkit.note}" if toolkit.note else "")
            )
        return (
            f"driver {driver} is below {minimum}, the driver CUDA {toolkit.release} "
            f"ships with ({why})"
        )
    return (
        f"driver {driver} is below {minimum}, NVIDIA's minor-version-compatibility floor for CUDA "
        f"{_cuda_series(toolkit)} on {os_name} (the combo relies on that compatibility, so it "
        f"needs only the floor, not CUDA {toolkit.release}'s own {toolkit.driver[os_name]})"
    )


def assess(
    combo: Combo, gpu: GpuSpec, platform: Platform, driver: DriverVersion | None
) -> Assessment:
    """The verdict and its reasons for one combo, GPU, platform and (optional) driver."""
    if platform not in combo.platforms:
        gap = combo.uncovered.get(platform)
        reason = gap.reason if gap else "no route is recorded"
        covered = ", ".join(combo.platforms) or "none"
        return Assessment(
            "platform-unsupported",
            (f"{combo.name} has no {platform} route: {reason} (covered: {covered})",),
        )
    route = combo.platforms[platform]
    toolkit = combo.toolkit
    os_name = os_of(platform)
    minimum = parse_driver(route.min_driver.value)
    if driver is not None and driver < minimum:
        return Assessment(
            "driver-too-old", (_driver_reason(combo, platform, driver),), str(minimum)
        )

    reasons: list[str] = []
    cc = gpu.cc
    lowest, highest = _cap(toolkit.min_sm), _cap(toolkit.max_sm)
    targets = route.targets
    sass, ptx = _caps(targets.sass), _caps(targets.ptx)
    caveat = _targets_caveat(targets)

    if cc.major > highest.major:
        reasons.append(
            f"{gpu.describe()} is newer than any architecture CUDA {toolkit.version} knows: it "
            f"compiles for sm_{lowest.sm} to sm_{highest.sm}, so neither TensorFlow "
            f"{combo.tensorflow.value}'s kernels nor the CUDA {toolkit.version} / cuDNN "
            f"{combo.cudnn.value} libraries carry code built for compute capability {cc.major}.x"
        )
        return Assessment("gpu-too-new", tuple(reasons))

    oldest = min([*sass, *ptx], default=lowest)
    if cc < lowest or cc < oldest:
        floor = max(lowest, oldest)
        reasons.append(
            f"{gpu.describe()} is older than the oldest architecture {combo.name} carries "
            f"(sm_{floor.sm}: CUDA {toolkit.version} starts at sm_{lowest.sm}, the build's "
            f"SASS is {_sm_list(sass, 'sm')} and its PTX {_sm_list(ptx, 'compute')})"
        )
        if caveat:
            reasons.append(caveat)
        return Assessment("gpu-too-old", tuple(reasons))

    native = [s for s in sass if s.major == cc.major and s.minor <= cc.minor]
    if native:
        best = max(native)
        reasons.append(
            f"the build carries SASS for sm_{best.sm}, which runs natively on compute capability "
            f"{cc} (same major {cc.major}, minor {best.minor} <= {cc.minor})"
        )
        if caveat:
            reasons.append(caveat)
        return Assessment("supported", tuple(reasons))

    jit = [p for p in ptx if p <= cc]
    if not jit:
        reasons.append(
            f"the build has no code {gpu.describe()} can run: its SASS ({_sm_list(sass, 'sm')}) "
            f"has nothing for {cc.major}.x at or below {cc}, and its PTX "
            f"({_sm_list(ptx, 'compute')}) is all for newer architectures"
        )
        if caveat:
            reasons.append(caveat)
        return Assessment("gpu-too-old", tuple(reasons))

    best = max(jit)
    own_driver = parse_driver(toolkit.driver[os_name])
    if (
        driver is not None
        and route.driver_threshold == "minor-version-compat"
        and driver < own_driver
    ):
        return Assessment(
            "driver-too-old",
            (
                f"{gpu.describe()} needs PTX JIT (the build's newest usable PTX is "
                f"compute_{best.sm}), and JIT of PTX from CUDA {toolkit.release} needs that "
                f"toolkit's own driver {own_driver} or newer; driver {driver} meets only the "
                f"minor-version-compatibility floor {minimum}, which does not cover PTX JIT",
            ),
            str(own_driver),
        )
    reasons.append(
        f"the build carries no SASS for compute capability {cc.major}.x (SASS: "
        f"{_sm_list(sass, 'sm')}); the driver JIT-compiles its PTX for compute_{best.sm} at "
        f"first start, which is slow (minutes; TensorFlow warns it can take 30 minutes or longer)"
    )
    reasons.append(JIT_CACHE_ADVICE)
    if caveat:
        reasons.append(caveat)
    return Assessment("ptx-jit", tuple(reasons))


# --------------------------------------------------------------------------------------------
# Alternatives: computed from the catalog, never hard-coded.


@dataclass(frozen=True)
class Candidate:
    combo: Combo
    assessment: Assessment


def _tf_distance(a: Combo, b: Combo) -> int:
    (am, an), (bm, bn) = a.tf_series, b.tf_series
    return abs((am * 100 + an) - (bm * 100 + bn))


def unconfirmed_facts(combo: Combo, platform: Platform) -> int:
    """How many of the facts a platform's install rests on are unconfirmed: pins, and the GPU
    code list. Used to rank otherwise equal choices: a confirmed combo is the safer advice."""
    route = combo.route(platform)
    return sum(not pin.confirmed for pin in route.all_pins()) + (not route.targets.confirmed)


def runnable_combos(
    catalog: Catalog,
    gpus: Sequence[GpuSpec],
    platform: Platform,
    driver: DriverVersion | None,
) -> list[Candidate]:
    """Every combo that runs on all ``gpus`` there; native before JIT, then newest TF first.

    The verdict of a combo over several GPUs is its worst one (``ptx-jit`` if any GPU needs JIT).
    """
    out: list[Candidate] = []
    for combo in catalog:
        found = [assess(combo, gpu, platform, driver) for gpu in gpus]
        if not found or not all(a.verdict in RUNNABLE for a in found):
            continue
        worst = max(found, key=lambda a: VERDICTS.index(a.verdict))
        out.append(Candidate(combo, worst))
    out.sort(
        key=lambda c: (
            VERDICTS.index(c.assessment.verdict),
            unconfirmed_facts(c.combo, platform),
            tuple(-x for x in c.combo.tf_series),
            c.combo.name,
        )
    )
    return out


def _nearest_runnable(
    catalog: Catalog, combo: Combo, gpu: GpuSpec, platform: Platform, driver: DriverVersion | None
) -> Candidate | None:
    """The runnable combo closest to ``combo``: native first, then the fewest unconfirmed facts,
    then the same TF major, then the nearest TF version (the least migration for the user's
    code)."""
    pool = [
        c for c in runnable_combos(catalog, [gpu], platform, driver) if c.combo.name != combo.name
    ]
    if not pool:
        return None
    return min(
        pool,
        key=lambda c: (
            VERDICTS.index(c.assessment.verdict),
            unconfirmed_facts(c.combo, platform),
            c.combo.tf_series[0] != combo.tf_series[0],
            _tf_distance(c.combo, combo),
            tuple(-x for x in c.combo.tf_series),
        ),
    )


def _combo_fix(candidate: Candidate | None, lead: str) -> Fix | None:
    if candidate is None:
        return None
    how = (
        "with native kernels"
        if candidate.assessment.verdict == "supported"
        else "after PTX JIT (slow first start)"
    )
    return Fix(
        text=f"{lead}{candidate.combo.name} (TensorFlow {candidate.combo.tensorflow.value}, "
        f"CUDA {candidate.combo.cuda.value}), which runs there {how}",
        combo=candidate.combo.name,
    )


def check(
    catalog: Catalog,
    combo: Combo,
    gpu: GpuSpec,
    platform: Platform,
    driver: DriverVersion | None,
) -> CompatResult:
    """Assess ``combo`` and, unless it runs natively, say what to use instead."""
    found = assess(combo, gpu, platform, driver)
    reasons = list(found.reasons)
    fix: Fix | None = None
    if found.verdict == "driver-too-old":
        os_name = os_of(platform)
        other = _nearest_runnable(catalog, combo, gpu, platform, driver)
        text = f"install NVIDIA driver {found.needed_driver} or newer ({os_name})"
        if other is not None:
            text += f", or keep driver {driver} and use {other.combo.name}"
        fix = Fix(text=text, combo=other.combo.name if other else None, driver=found.needed_driver)
    elif found.verdict == "ptx-jit":
        native = _nearest_runnable(catalog, combo, gpu, platform, driver)
        if native is not None and native.assessment.verdict == "supported":
            fix = _combo_fix(native, "for native kernels (no JIT) use ")
        else:
            reasons.append(
                f"no combo in the catalog carries SASS for compute capability {gpu.cc.major}.x "
                f"on {platform}; JIT is the only way to run this GPU"
            )
    elif found.verdict != "supported":
        other = _nearest_runnable(catalog, combo, gpu, platform, driver)
        fix = _combo_fix(other, "use ")
        if fix is None:
            reasons.append(f"no combo in the catalog runs {gpu.describe()} on {platform}")
    if driver is None and found.verdict in RUNNABLE:
        route = combo.platforms[platform]
        reasons.append(
            f"driver not checked (give --driver): {combo.name} needs {route.min_driver.value} "
            f"or newer on {os_of(platform)}, {route.min_driver.note}"
        )
    return CompatResult(
        combo=combo.name,
        platform=platform,
        gpu=gpu,
        driver=driver,
        verdict=found.verdict,
        reasons=tuple(reasons),
        fix=fix,
    )


def verdict_counts(results: Iterable[CompatResult]) -> Mapping[Verdict, int]:
    counts: dict[Verdict, int] = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    return counts
