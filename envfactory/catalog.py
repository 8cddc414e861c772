"""The catalog: TensorFlow/CUDA combos and the sourced facts behind them.

The YAML files in ``envfactory/data/`` are read once, validated (unknown keys and wrong types are
rejected with file and line) and turned into frozen records. Everything downstream (render, lock,
compat, doctor) reads these records, never the YAML.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, cast, get_args

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from envfactory.errors import CatalogError, UserInputError, did_you_mean
from envfactory.yamlio import YamlReader, load_yaml

Platform = Literal["linux-64", "win-64"]
PLATFORMS: tuple[Platform, ...] = get_args(Platform)
OperatingSystem = Literal["linux", "windows"]

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


def os_of(platform: Platform) -> OperatingSystem:
    return "windows" if platform.startswith("win") else "linux"


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

    def combo(self, name: str) -> Combo:
        try:
            return self.combos[name]
        except KeyError:
            hint = did_you_mean(name, self.combos, "envfactory list")
            raise UserInputError(f"unknown combo '{name}'", hint) from None

    def __iter__(self) -> Iterator[Combo]:
        return iter(self.combos.values())


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def parse_platform(text: str) -> Platform:
    for platform in PLATFORMS:
        if text == platform:
            return platform
    raise UserInputError(
        f"unknown platform '{text}'", did_you_mean(text, PLATFORMS, "envfactory render --help")
    )


_SPEC = re.compile(
    r"^(?:(?P<channel>[\w./-]+)::)?(?P<name>[\w.-]+)=(?P<version>[^=\s]+)(?:=(?P<build>[^=\s]+))?$"
)


class _Loader:
    def __init__(self, texts: Mapping[str, str], directory: str) -> None:
        self.texts = texts
        self.directory = directory
        self.sources: dict[str, Source] = {}

    def load(self) -> Catalog:
        self._load_sources()
        toolkits = self._load_toolkits()
        targets = self._load_targets()
        combos = self._load_combos(toolkits, targets)
        return Catalog(combos=combos, sources=self.sources, toolkits=toolkits, targets=targets)

    def _doc(self, name: str, top: str) -> tuple[YamlReader, CommentedMap]:
        label = f"{self.directory}/{name}"
        reader = YamlReader(label)
        doc = reader.mapping(load_yaml(label, self.texts[name]), f"{name} (top level)", {top})
        return reader, reader.mapping(doc[top], top, set(), set(doc[top] or {}))

    def _source_ids(self, r: YamlReader, parent: CommentedMap, what: str) -> tuple[str, ...]:
        ids = r.strings(parent, "sources", what)
        if not ids:
            raise r.fail(parent, f"{what} has no source; every fact needs one")
        for sid in ids:
            if sid not in self.sources:
                line = parent.lc.key("sources")[0] + 1
                raise CatalogError(
                    f"{r.path}:{line}: unknown source id '{sid}' in {what}",
                    did_you_mean(sid, self.sources, "envfactory/data/sources.yaml"),
                )
        return ids

    def _load_sources(self) -> None:
        r, table = self._doc("sources.yaml", "sources")
        for sid, node in table.items():
            m = r.mapping(node, f"source '{sid}'", {"citation"}, {"url"})
            self.sources[str(sid)] = Source(
                id=str(sid),
                citation=r.string(m, "citation", sid),
                url=r.opt_string(m, "url", sid),
            )

    def _load_toolkits(self) -> dict[str, Toolkit]:
        r, table = self._doc("toolkits.yaml", "toolkits")
        out: dict[str, Toolkit] = {}
        for version, node in table.items():
            what = f"toolkit '{version}'"
            m = r.mapping(
                node,
                what,
                {"release", "driver", "min_sm", "max_sm", "sources", "confirmed"},
                {"compat_floor", "note"},
            )
            driver = r.mapping(m["driver"], f"{what} driver", {"linux", "windows"})
            floor_node = m.get("compat_floor")
            floor = None
            if floor_node is not None:
                fm = r.mapping(floor_node, f"{what} compat_floor", {"linux", "windows"})
                floor = {
                    "linux": r.string(fm, "linux", what),
                    "windows": r.string(fm, "windows", what),
                }
            out[str(version)] = Toolkit(
                version=str(version),
                release=r.string(m, "release", what),
                driver={
                    "linux": r.string(driver, "linux", what),
                    "windows": r.string(driver, "windows", what),
                },
                compat_floor=cast("Mapping[OperatingSystem, str] | None", floor),
                min_sm=r.string(m, "min_sm", what),
                max_sm=r.string(m, "max_sm", what),
                sources=self._source_ids(r, m, what),
                confirmed=r.boolean(m, "confirmed", what),
                note=r.opt_string(m, "note", what),
            )
        return out

    def _load_targets(self) -> dict[str, GpuTargets]:
        r, table = self._doc("gpu-targets.yaml", "targets")
        out: dict[str, GpuTargets] = {}
        for tid, node in table.items():
            what = f"targets '{tid}'"
            m = r.mapping(node, what, {"sass", "ptx", "sources", "confirmed"}, {"note"})
            out[str(tid)] = GpuTargets(
                id=str(tid),
                sass=r.strings(m, "sass", what),
                ptx=r.strings(m, "ptx", what),
                sources=self._source_ids(r, m, what),
                confirmed=r.boolean(m, "confirmed", what),
                note=r.opt_string(m, "note", what),
            )
        return out

    def _fact(self, r: YamlReader, parent: CommentedMap, key: str, what: str) -> Fact[str]:
        m = r.mapping(parent[key], f"{what} {key}", {"value", "sources", "confirmed"}, {"note"})
        return Fact(
            value=r.string(m, "value", f"{what} {key}"),
            sources=self._source_ids(r, m, f"{what} {key}"),
            confirmed=r.boolean(m, "confirmed", f"{what} {key}"),
            note=r.opt_string(m, "note", f"{what} {key}"),
        )

    def _conda_pins(self, r: YamlReader, seq: CommentedSeq, what: str) -> tuple[CondaPin, ...]:
        pins = []
        for node in seq:
            m = r.mapping(node, f"pin in {what}", {"spec", "sources", "confirmed"}, {"note"})
            spec = r.string(m, "spec", what)
            match = _SPEC.match(spec)
            if not match:
                raise r.fail(
                    m, f"conda pin '{spec}' in {what} is not [channel::]name=version[=build]"
                )
            pin = CondaPin(
                name=match["name"],
                version=match["version"],
                build=match["build"],
                channel=match["channel"],
                sources=self._source_ids(r, m, f"pin {spec}"),
                confirmed=r.boolean(m, "confirmed", what),
                note=r.opt_string(m, "note", what),
            )
            if pin.name in VARIANT_PACKAGES and pin.build is None and pin.confirmed:
                raise r.fail(
                    m,
                    f"variant-selecting pin '{spec}' in {what} has no build string",
                    "pin the exact build, or mark the pin 'confirmed: false' with a note",
                )
            pins.append(pin)
        return tuple(pins)

    def _pip_pins(self, r: YamlReader, seq: CommentedSeq, what: str) -> tuple[PipPin, ...]:
        pins = []
        for node in seq:
            m = r.mapping(node, f"pip pin in {what}", {"spec", "sources", "confirmed"}, {"note"})
            spec = r.string(m, "spec", what)
            pins.append(
                PipPin(
                    requirement=spec,
                    sources=self._source_ids(r, m, f"pip {spec}"),
                    confirmed=r.boolean(m, "confirmed", what),
                    note=r.opt_string(m, "note", what),
                )
            )
        return tuple(pins)

    def _route(
        self,
        r: YamlReader,
        node: Any,
        name: str,
        platform: Platform,
        toolkit: Toolkit,
        targets: Mapping[str, GpuTargets],
        default_targets: GpuTargets,
    ) -> PlatformRoute:
        what = f"{name} {platform}"
        m = r.mapping(
            node,
            what,
            {"route", "channels", "pythons", "driver_threshold"},
            {"conda", "conda_by_python", "pip", "glibc", "targets"},
        )
        route_targets = default_targets
        if m.get("targets") is not None:
            tid = r.string(m, "targets", what)
            if tid not in targets:
                raise r.fail(
                    m,
                    f"{what} names unknown targets '{tid}'",
                    did_you_mean(tid, targets, "envfactory/data/gpu-targets.yaml"),
                )
            route_targets = targets[tid]
        route = self._fact(r, m, "route", what)
        if route.value not in ROUTES:
            raise r.fail(
                m, f"unknown route '{route.value}' in {what}", f"use one of {', '.join(ROUTES)}"
            )
        threshold = r.string(m, "driver_threshold", what)
        if threshold not in get_args(DriverThreshold):
            raise r.fail(m, f"driver_threshold in {what} must be toolkit or minor-version-compat")
        pythons = r.strings(m, "pythons", what)
        by_python: dict[str, tuple[CondaPin, ...]] = {}
        if m.get("conda_by_python") is not None:
            table = r.mapping(m["conda_by_python"], f"{what} conda_by_python", set(), set(pythons))
            for py, seq in table.items():
                if not isinstance(seq, CommentedSeq):
                    raise r.fail(table, f"conda_by_python '{py}' in {what} must be a list")
                by_python[str(py)] = self._conda_pins(r, seq, f"{what} python {py}")
        os_name = os_of(platform)
        threshold_t = cast(DriverThreshold, threshold)
        if threshold_t == "toolkit" or toolkit.compat_floor is None:
            driver = toolkit.driver[os_name]
            driver_note = f"the driver CUDA {toolkit.release} ships with"
        else:
            driver = toolkit.compat_floor[os_name]
            major = toolkit.version.split(".")[0]
            driver_note = f"NVIDIA's minor-version-compatibility floor for CUDA {major}.x"
        return PlatformRoute(
            platform=platform,
            route=cast(Fact[RouteKind], route),
            channels=r.strings(m, "channels", what),
            pythons=pythons,
            conda=self._conda_pins(r, r.sequence(m, "conda", what), what) if "conda" in m else (),
            conda_by_python=by_python,
            pip=self._pip_pins(r, r.sequence(m, "pip", what), what) if "pip" in m else (),
            min_driver=Fact(driver, toolkit.sources, toolkit.confirmed, driver_note),
            driver_threshold=threshold_t,
            glibc=r.opt_string(m, "glibc", what),
            targets=route_targets,
        )

    def _load_combos(
        self, toolkits: Mapping[str, Toolkit], targets: Mapping[str, GpuTargets]
    ) -> dict[str, Combo]:
        r, table = self._doc("combos.yaml", "combos")
        out: dict[str, Combo] = {}
        for name, node in table.items():
            name = str(name)
            if not re.fullmatch(r"tf\d{2,3}-cuda\d{3}", name):
                raise r.fail(
                    node, f"combo name '{name}' is not tf<major><minor>-cuda<major><minor>"
                )
            m = r.mapping(
                node,
                f"combo '{name}'",
                {
                    "summary",
                    "tensorflow",
                    "cuda",
                    "cudnn",
                    "python_default",
                    "targets",
                    "platforms",
                },
                {"uncovered", "tf_cpp_min_log_level", "deviation", "notes"},
            )
            cuda = self._fact(r, m, "cuda", name)
            if cuda.value not in toolkits:
                raise r.fail(
                    m, f"combo '{name}' names CUDA {cuda.value}, which toolkits.yaml lacks"
                )
            target_id = r.string(m, "targets", name)
            if target_id not in targets:
                raise r.fail(
                    m,
                    f"combo '{name}' names unknown targets '{target_id}'",
                    did_you_mean(target_id, targets, "envfactory/data/gpu-targets.yaml"),
                )
            toolkit = toolkits[cuda.value]
            plat_table = r.mapping(m["platforms"], f"{name} platforms", set(), set(PLATFORMS))
            routes = {
                cast(Platform, p): self._route(
                    r, v, name, cast(Platform, p), toolkit, targets, targets[target_id]
                )
                for p, v in plat_table.items()
            }
            uncovered: dict[Platform, Uncovered] = {}
            if m.get("uncovered") is not None:
                gaps = r.mapping(m["uncovered"], f"{name} uncovered", set(), set(PLATFORMS))
                for p, v in gaps.items():
                    g = r.mapping(
                        v, f"{name} uncovered {p}", {"reason", "sources"}, {"alternative"}
                    )
                    uncovered[cast(Platform, p)] = Uncovered(
                        platform=cast(Platform, p),
                        reason=r.string(g, "reason", name),
                        sources=self._source_ids(r, g, f"{name} uncovered {p}"),
                        alternative=r.opt_string(g, "alternative", name),
                    )
            for p in PLATFORMS:
                if (p in routes) == (p in uncovered):
                    raise r.fail(
                        m, f"combo '{name}' must either cover {p} or say why not (uncovered)"
                    )
            combo = Combo(
                name=name,
                summary=r.string(m, "summary", name),
                tensorflow=self._fact(r, m, "tensorflow", name),
                cuda=cuda,
                cudnn=self._fact(r, m, "cudnn", name),
                python_default=r.string(m, "python_default", name),
                targets=targets[target_id],
                toolkit=toolkit,
                platforms=routes,
                uncovered=uncovered,
                tf_cpp_min_log_level=(
                    r.integer(m, "tf_cpp_min_log_level", name) if "tf_cpp_min_log_level" in m else 2
                ),
                deviation=r.opt_string(m, "deviation", name),
                notes=r.strings(m, "notes", name) if "notes" in m else (),
            )
            for route in routes.values():
                if combo.python_default not in route.pythons:
                    raise r.fail(
                        m,
                        f"python_default {combo.python_default} of '{name}' is not "
                        f"allowed on {route.platform} ({', '.join(route.pythons)})",
                    )
            out[name] = combo
        return out


DATA_FILES = ("sources.yaml", "toolkits.yaml", "gpu-targets.yaml", "combos.yaml")


def load_catalog_from(directory: Path) -> Catalog:
    """Load a catalog from a directory of data files (tests use this on edited copies)."""
    texts = {}
    for name in DATA_FILES:
        path = directory / name
        try:
            texts[name] = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CatalogError(f"{path}: cannot read: {exc.strerror}") from None
    return _Loader(texts, str(directory)).load()


@functools.cache
def load_catalog() -> Catalog:
    """The catalog shipped inside the package, loaded once per process."""
    data = resources.files("envfactory") / "data"
    texts = {name: (data / name).read_text(encoding="utf-8") for name in DATA_FILES}
    return _Loader(texts, str(data)).load()


# --------------------------------------------------------------------------------------------
# Plain-data views of a combo, for `list --json`, `show --json` and the human tables.


def _fact_view(fact: Fact[str]) -> dict[str, Any]:
    view: dict[str, Any] = {
        "value": fact.value,
        "sources": list(fact.sources),
        "confirmed": fact.confirmed,
    }
    if fact.note:
        view["note"] = fact.note
    return view


def _pin_view(pin: CondaPin | PipPin) -> dict[str, Any]:
    spec = pin.qualified_spec if isinstance(pin, CondaPin) else pin.requirement
    view: dict[str, Any] = {"spec": spec, "confirmed": pin.confirmed, "sources": list(pin.sources)}
    if pin.note:
        view["note"] = pin.note
    return view


def summarize(combo: Combo) -> dict[str, Any]:
    """One row of ``envfactory list``."""
    return {
        "name": combo.name,
        "tensorflow": combo.tensorflow.value,
        "cuda": combo.cuda.value,
        "cudnn": combo.cudnn.value,
        "python": {"allowed": list(combo.python_allowed), "default": combo.python_default},
        "platforms": {p: r.route.value for p, r in combo.platforms.items()},
        "uncovered": sorted(combo.uncovered),
        "deviation": combo.deviation,
        "unconfirmed_pins": sum(
            not pin.confirmed for r in combo.platforms.values() for pin in r.all_pins()
        ),
        "summary": combo.summary,
    }


def describe(catalog: Catalog, combo: Combo) -> dict[str, Any]:
    """Every fact of a combo with its sources: the ``show --json`` document."""
    platforms: dict[str, Any] = {}
    used_sources: set[str] = set()

    def cite(ids: tuple[str, ...]) -> None:
        used_sources.update(ids)

    for fact in (combo.tensorflow, combo.cuda, combo.cudnn):
        cite(fact.sources)
    for platform, route in combo.platforms.items():
        pins = route.conda_pins(combo.python_default)
        by_python = {py: [p.spec for p in route.conda_pins(py)] for py in route.pythons}
        for pin in route.all_pins():
            cite(pin.sources)
        cite(route.route.sources)
        cite(route.min_driver.sources)
        cite(route.targets.sources)
        platforms[platform] = {
            "route": route.route.value,
            "route_title": ROUTE_TITLES[route.route.value],
            "route_fact": _fact_view(route.route),  # type: ignore[arg-type]
            "channels": list(route.channels),
            "pythons": list(route.pythons),
            "pins": [p.spec for p in pins],
            "pins_by_python": by_python,
            "pin_details": [_pin_view(p) for p in pins],
            "pip": [p.requirement for p in route.pip],
            "pip_details": [_pin_view(p) for p in route.pip],
            "min_driver": route.min_driver.value,
            "driver_threshold": route.driver_threshold,
            "driver_note": route.min_driver.note,
            "sass": list(route.targets.sass),
            "ptx": list(route.targets.ptx),
            "targets_confirmed": route.targets.confirmed,
        }
    uncovered = {}
    for platform, gap in combo.uncovered.items():
        cite(gap.sources)
        uncovered[platform] = {
            "reason": gap.reason,
            "alternative": gap.alternative,
            "sources": list(gap.sources),
        }
    cite(combo.targets.sources)
    cite(combo.toolkit.sources)
    toolkit = combo.toolkit
    min_driver = {os_of(p): r.min_driver.value for p, r in combo.platforms.items()}
    return {
        "name": combo.name,
        "summary": combo.summary,
        "tensorflow": combo.tensorflow.value,
        "cuda": combo.cuda.value,
        "cudnn": combo.cudnn.value,
        "python": {"allowed": list(combo.python_allowed), "default": combo.python_default},
        "facts": {
            "tensorflow": _fact_view(combo.tensorflow),
            "cuda": _fact_view(combo.cuda),
            "cudnn": _fact_view(combo.cudnn),
        },
        "deviation": combo.deviation,
        "tf_cpp_min_log_level": combo.tf_cpp_min_log_level,
        "platforms": platforms,
        "uncovered": uncovered,
        "min_driver": min_driver,
        "sass": list(combo.targets.sass),
        "ptx": list(combo.targets.ptx),
        "targets": {
            "id": combo.targets.id,
            "confirmed": combo.targets.confirmed,
            "note": combo.targets.note,
            "sources": list(combo.targets.sources),
        },
        "toolkit": {
            "version": toolkit.version,
            "release": toolkit.release,
            "driver": dict(toolkit.driver),
            "compat_floor": dict(toolkit.compat_floor) if toolkit.compat_floor else None,
            "min_sm": toolkit.min_sm,
            "max_sm": toolkit.max_sm,
            "confirmed": toolkit.confirmed,
            "note": toolkit.note,
            "sources": list(toolkit.sources),
        },
        "sources": {
            sid: {"citation": catalog.sources[sid].citation, "url": catalog.sources[sid].url}
            for sid in sorted(used_sources)
        },
    }
