"""The catalog: TensorFlow/CUDA combos and the sourced facts behind them.

The YAML files in ``envfactory/data/`` are read once, validated (unknown keys and wrong types are
rejected with file and line) and turned into frozen records. Everything downstream (render, lock,
compat, doctor) reads these records, never the YAML.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar, get_args

from envfactory.catalog.platforms import PLATFORMS as PLATFORMS
from envfactory.catalog.platforms import OperatingSystem as OperatingSystem
from envfactory.catalog.platforms import Platform as Platform
from envfactory.catalog.platforms import host_platform as host_platform
from envfactory.catalog.platforms import os_of as os_of
from envfactory.catalog.platforms import parse_platform as parse_platform
from envfactory.errors import UserInputError, nearest

RouteKind = Literal["conda", "conda-cuda+pip", "pip-and-cuda"]
ROUTES: tuple[RouteKind, ...] = get_args(RouteKind)
ROUTE_TITLES: Mapping[RouteKind, str] = {
    "conda": "conda packages (TensorFlow GPU build from a conda channel)",
    "conda-cuda+pip": "conda CUDA libraries + pip TensorFlow wheel",
    "pip-and-cuda": "pip tensorflow[and-cuda] (CUDA libraries as pip wheels)",
}

DriverThreshold = Literal["toolkit", "minor-version-compat"]

# Packages whose build string selects the GPU/CPU variant or the CUDA version: pinned exactly.
VARIANT_PACKAGES = frozenset(
    {
        "tensorflow-gpu",
        "tensorflow",
        "tensorflow-base",
        "_tflow_select",
        "cudatoolkit",
        "cudnn",
        "cupti",
    }
)

T = TypeVar("T")


@dataclass(frozen=True)
class Source:
    id: str
    citation: str
    url: str | None


@dataclass(frozen=True)
class Fact(Generic[T]):
    """One value with where it comes from and whether it was read verbatim in that source."""

    value: T
    sources: tuple[str, ...]
    confirmed: bool
    note: str | None = None


@dataclass(frozen=True)
class CondaPin:
    name: str
    version: str
    build: str | None
    channel: str | None
    sources: tuple[str, ...]
    confirmed: bool
    note: str | None = None

    @property
    def spec(self) -> str:
        """``name=version=build`` (or ``name=version``), the form conda and ``show`` use."""
        return "=".join(p for p in (self.name, self.version, self.build) if p)

    @property
    def qualified_spec(self) -> str:
        """The spec with its channel, ``channel::name=version=build``, for environment files."""
        return f"{self.channel}::{self.spec}" if self.channel else self.spec


@dataclass(frozen=True)
class PipPin:
    requirement: str
    sources: tuple[str, ...]
    confirmed: bool
    note: str | None = None

    @property
    def name(self) -> str:
        return re.split(r"[\[=<>!~ ;]", self.requirement, maxsplit=1)[0].lower()


BoundKind = Literal["declared", "breakage", "preference"]
BOUND_KINDS: tuple[BoundKind, ...] = ("declared", "breakage", "preference")


@dataclass(frozen=True)
class Constraint:
    """A companion constraint: a bound on a transitive package that decides whether a TensorFlow
    line imports and works (protobuf, h5py, numpy, ...), applied on the conda and the pip side
    alike to every combo whose TensorFlow version ``tensorflow`` selects."""

    package: str
    spec: str
    tensorflow: str
    sources: tuple[str, ...]
    confirmed: bool
    note: str | None = None
    conda_name: str | None = None
    not_channels: tuple[str, ...] = ()
    kind: BoundKind = "preference"
    """'declared': every release in range declares it (its Requires-Dist); 'breakage': a sourced
    report of the failure past it; 'preference': a tighter choice lock makes for safety, never
    reported as a problem by audit"""

    @property
    def requirement(self) -> str:
        """The PEP 440 form, ``protobuf<3.20`` (pip/uv constraint files)."""
        return f"{self.package}{self.spec}"

    @property
    def conda_spec(self) -> str:
        """The conda match-spec form, ``protobuf <3.20``."""
        return f"{self.conda_name or self.package} {self.spec}"

    def names(self) -> frozenset[str]:
        """The package's names: its PyPI name and, where different, its conda name."""
        return frozenset({self.package, self.conda_name or self.package})

    def applies_to_route(self, route: PlatformRoute) -> bool:
        """Whether the bound holds for a route: a conda route whose TensorFlow is built by a
        channel in ``not_channels`` (conda-forge builds TF from source against its own
        protobuf) is exempt."""
        return route.route.value != "conda" or not set(route.channels) & set(self.not_channels)

    def applies_to(self, tensorflow: str) -> bool:
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(self.tensorflow).contains(tensorflow, prereleases=True)

    def allows(self, version: str) -> bool:
        """Whether ``version`` (a pip or conda version) is inside the bound; a version that is
        not PEP 440 is compared by its release numbers."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            parsed = Version(version)
        except InvalidVersion:
            numbers = re.match(r"\d+(\.\d+)*", version)
            if numbers is None:
                return False
            parsed = Version(numbers.group(0))
        return SpecifierSet(self.spec).contains(parsed, prereleases=True)


@dataclass(frozen=True)
class PlatformRoute:
    """How a combo is installed on one platform."""

    platform: Platform
    route: Fact[RouteKind]
    channels: tuple[str, ...]
    pythons: tuple[str, ...]
    conda: tuple[CondaPin, ...]
    conda_by_python: Mapping[str, tuple[CondaPin, ...]]
    pip: tuple[PipPin, ...]
    min_driver: Fact[str]
    driver_threshold: DriverThreshold
    glibc: str | None
    targets: GpuTargets

    def conda_pins(self, python: str) -> tuple[CondaPin, ...]:
        return self.conda + self.conda_by_python.get(python, ())

    def all_pins(self) -> tuple[CondaPin | PipPin, ...]:
        """Every pin of the route, for every Python."""
        per_python = tuple(p for pins in self.conda_by_python.values() for p in pins)
        return (*self.conda, *per_python, *self.pip)


@dataclass(frozen=True)
class Uncovered:
    """A platform a combo deliberately does not cover, and why."""

    platform: Platform
    reason: str
    sources: tuple[str, ...]
    alternative: str | None


@dataclass(frozen=True)
class GpuTargets:
    """Compute capabilities a TensorFlow build carries as SASS (native) and as PTX (JIT)."""

    id: str
    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    sources: tuple[str, ...]
    confirmed: bool
    note: str | None


@dataclass(frozen=True)
class Toolkit:
    """A CUDA toolkit family: its drivers and the architectures it compiles for."""

    version: str
    release: str
    driver: Mapping[OperatingSystem, str]
    compat_floor: Mapping[OperatingSystem, str] | None
    min_sm: str
    max_sm: str
    sources: tuple[str, ...]
    confirmed: bool
    note: str | None


@dataclass(frozen=True)
class Combo:
    name: str
    summary: str
    tensorflow: Fact[str]
    cuda: Fact[str]
    cudnn: Fact[str]
    python_default: str
    targets: GpuTargets
    toolkit: Toolkit
    platforms: Mapping[Platform, PlatformRoute]
    uncovered: Mapping[Platform, Uncovered]
    tf_cpp_min_log_level: int
    deviation: str | None
    notes: tuple[str, ...] = field(default=())
    constraints: tuple[Constraint, ...] = field(default=())

    def constraints_for(self, platform: Platform) -> tuple[Constraint, ...]:
        """The companion constraints that hold on ``platform``'s route."""
        route = self.route(platform)
        return tuple(c for c in self.constraints if c.applies_to_route(route))

    @property
    def python_allowed(self) -> tuple[str, ...]:
        found = {py for route in self.platforms.values() for py in route.pythons}
        return tuple(sorted(found, key=_version_key))

    @property
    def tf_series(self) -> tuple[int, int]:
        major, minor = self.tensorflow.value.split(".")[:2]
        return int(major), int(minor)

    def route(self, platform: Platform) -> PlatformRoute:
        if platform in self.platforms:
            return self.platforms[platform]
        gap = self.uncovered.get(platform)
        reason = gap.reason if gap else "no route is recorded"
        hint = (
            f"use {gap.alternative}, or choose from: {', '.join(self.platforms)}"
            if gap and gap.alternative
            else f"covered platforms: {', '.join(self.platforms)}"
        )
        raise UserInputError(f"{self.name} does not cover {platform}: {reason}", hint)


@dataclass(frozen=True)
class Catalog:
    combos: Mapping[str, Combo]
    sources: Mapping[str, Source]
    toolkits: Mapping[str, Toolkit]
    targets: Mapping[str, GpuTargets]
    constraints: tuple[Constraint, ...] = ()

    def combo(self, name: str) -> Combo:
        try:
            return self.combos[name]
        except KeyError:
            close = suggest_combos(self, name)
            hint = (
                f"did you mean {', '.join(close)}? see 'envfactory list'"
                if close
                else "see 'envfactory list'"
            )
            raise UserInputError(f"unknown combo '{name}'", hint) from None

    def __iter__(self) -> Iterator[Combo]:
        return iter(self.combos.values())


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


_DOTTED = re.compile(r"(?<![\d.])(\d{1,2})\.(\d{1,2})(?:\.\d+)?(?![\d.])")
_COMPACT = re.compile(r"(?<!\d)(\d{2,3})(?!\d)")


def suggest_combos(catalog: Catalog, name: str, n: int = 3) -> list[str]:
    """The combos a mistyped or partial NAME most likely means, best first: those of the
    TensorFlow version it names (``tf210``, ``tf2.10``, ``2.10``, ``tensorflow 2.10`` all mean
    2.10), closest spelling first; else the closest spellings of any combo."""
    import difflib

    query = name.strip().lower()
    tf_part = re.split(r"cuda|cu(?=\d)", query, maxsplit=1)[0]
    series: set[tuple[int, int]] = set()
    dotted = _DOTTED.search(tf_part)
    if dotted:
        series.add((int(dotted[1]), int(dotted[2])))
    else:
        compact = _COMPACT.search(tf_part)
        if compact:
            digits = compact[1]
            series.add((int(digits[0]), int(digits[1:])))
    names = sorted(catalog.combos)
    same = [c for c in names if catalog.combos[c].tf_series in series]
    if same:
        ranked = sorted(same, key=lambda c: -difflib.SequenceMatcher(None, query, c).ratio())
        return ranked if len(ranked) <= n else ranked[:n]
    return nearest(query, names, n)
