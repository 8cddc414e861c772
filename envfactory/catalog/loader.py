"""The catalog loader: the YAML files in ``envfactory/data/`` become frozen records.

Unknown keys and wrong types are rejected with file and line, once, here; everything downstream
reads the records (``envfactory.catalog.model``), never the YAML.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, get_args

from envfactory.catalog.model import (
    BOUND_KINDS,
    PLATFORMS,
    ROUTES,
    VARIANT_PACKAGES,
    Catalog,
    Combo,
    CondaPin,
    Constraint,
    DriverThreshold,
    Fact,
    GpuTargets,
    OperatingSystem,
    PipPin,
    Platform,
    PlatformRoute,
    RouteKind,
    Source,
    Toolkit,
    Uncovered,
    os_of,
)
from envfactory.compiled import DATA_DIR as DATA_DIR  # re-exported: tests and benchmarks use it
from envfactory.compiled import CompiledData
from envfactory.errors import CatalogError, did_you_mean

if TYPE_CHECKING:
    from envfactory.yamlio import YamlMap, YamlReader, YamlSeq

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
        constraints = self._load_constraints()
        combos = self._load_combos(toolkits, targets)
        combos = {
            name: replace(
                combo,
                constraints=tuple(c for c in constraints if c.applies_to(combo.tensorflow.value)),
            )
            for name, combo in combos.items()
        }
        return Catalog(
            combos=combos,
            sources=self.sources,
            toolkits=toolkits,
            targets=targets,
            constraints=constraints,
        )

    def _load_constraints(self) -> tuple[Constraint, ...]:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        from envfactory.yamlio import YamlReader, load_yaml

        label = f"{self.directory}/constraints.yaml"
        r = YamlReader(label)
        doc = r.mapping(
            load_yaml(label, self.texts["constraints.yaml"]), "constraints.yaml", {"constraints"}
        )
        out = []
        for node in r.sequence(doc, "constraints", "constraints.yaml"):
            m = r.mapping(
                node,
                "constraint",
                {"package", "spec", "tensorflow", "sources", "confirmed", "kind"},
                {"note", "conda_name", "not_channels"},
            )
            package = r.string(m, "package", "constraint")
            what = f"constraint on {package}"
            for key in ("spec", "tensorflow"):
                text = r.string(m, key, what)
                try:
                    SpecifierSet(text)
                except InvalidSpecifier:
                    raise r.fail(
                        m,
                        f"{key} '{text}' of the {what} is not a version specifier",
                        "write e.g. '<3.20' or '>=1.13,<2.4'",
                    ) from None
            kind = r.string(m, "kind", what)
            if kind not in BOUND_KINDS:
                raise r.fail(
                    m,
                    f"kind '{kind}' of the {what} is not one of {', '.join(BOUND_KINDS)}",
                    "declared: the releases' Requires-Dist; breakage: a sourced report; "
                    "preference: a choice lock makes",
                )
            out.append(
                Constraint(
                    kind=kind,
                    package=package,
                    spec=r.string(m, "spec", what),
                    tensorflow=r.string(m, "tensorflow", what),
                    sources=self._source_ids(r, m, what),
                    confirmed=r.boolean(m, "confirmed", what),
                    note=r.opt_string(m, "note", what),
                    conda_name=r.opt_string(m, "conda_name", what),
                    not_channels=(
                        r.strings(m, "not_channels", what) if "not_channels" in m else ()
                    ),
                )
            )
        return tuple(out)

    def _doc(self, name: str, top: str) -> tuple[YamlReader, YamlMap]:
        # yamlio (libyaml) is imported only here: commands read the compiled records
        # (envfactory/compiled.py) and need the YAML reader only when a data file was edited.
        from envfactory.yamlio import YamlReader, load_yaml

        label = f"{self.directory}/{name}"
        reader = YamlReader(label)
        doc = reader.mapping(load_yaml(label, self.texts[name]), f"{name} (top level)", {top})
        return reader, reader.mapping(doc[top], top, set(), set(doc[top] or {}))

    def _source_ids(self, r: YamlReader, parent: YamlMap, what: str) -> tuple[str, ...]:
        ids = r.strings(parent, "sources", what)
        if not ids:
            raise r.fail(parent, f"{what} has no source; every fact needs one")
        for sid in ids:
            if sid not in self.sources:
                line = parent.key_line("sources")
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

    def _fact(self, r: YamlReader, parent: YamlMap, key: str, what: str) -> Fact[str]:
        m = r.mapping(parent[key], f"{what} {key}", {"value", "sources", "confirmed"}, {"note"})
        return Fact(
            value=r.string(m, "value", f"{what} {key}"),
            sources=self._source_ids(r, m, f"{what} {key}"),
            confirmed=r.boolean(m, "confirmed", f"{what} {key}"),
            note=r.opt_string(m, "note", f"{what} {key}"),
        )

    def _conda_pins(self, r: YamlReader, seq: YamlSeq, what: str) -> tuple[CondaPin, ...]:
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

    def _pip_pins(self, r: YamlReader, seq: YamlSeq, what: str) -> tuple[PipPin, ...]:
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
            from envfactory.yamlio import YamlSeq

            for py, seq in table.items():
                if not isinstance(seq, YamlSeq):
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
        from envfactory.yamlio import YamlMap

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
            glibc=(
                self._fact(r, m, "glibc", what).value
                if isinstance(m.get("glibc"), YamlMap)
                else r.opt_string(m, "glibc", what)
            ),
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


DATA_FILES = (
    "sources.yaml",
    "toolkits.yaml",
    "gpu-targets.yaml",
    "combos.yaml",
    "constraints.yaml",
)


COMPILED = DATA_DIR / "catalog.pickle"


def load_from_texts(texts: Mapping[str, bytes], directory: str) -> Catalog:
    """Load a catalog from the bytes of its data files (``directory`` names them in errors)."""
    decoded = {}
    for name, data in texts.items():
        try:
            decoded[name] = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CatalogError(f"{directory}/{name}: not UTF-8 text: {exc}") from None
    return _Loader(decoded, directory).load()


def load_catalog_from(directory: Path) -> Catalog:
    """Load a catalog from a directory of data files (tests use this on edited copies)."""
    texts = {}
    for name in DATA_FILES:
        path = directory / name
        try:
            texts[name] = path.read_bytes()
        except OSError as exc:
            raise CatalogError(f"{path}: cannot read: {exc.strerror}") from None
    return load_from_texts(texts, str(directory))


# The record classes catalog.pickle holds (their fields are part of its fingerprint).
RECORDS: tuple[type, ...] = (
    Catalog,
    Combo,
    PlatformRoute,
    Uncovered,
    CondaPin,
    PipPin,
    Constraint,
    Fact,
    GpuTargets,
    Toolkit,
    Source,
)


DATA = CompiledData(
    COMPILED,
    tuple(DATA_DIR / name for name in DATA_FILES),
    RECORDS,
    Catalog,
    lambda texts: load_from_texts(texts, str(DATA_DIR)),
)


@functools.cache
def load_catalog() -> Catalog:
    """The catalog shipped inside the package, loaded once per process: the compiled records
    (``envfactory/compiled.py``) while they were made from these very data files, else the
    YAML."""
    return DATA.load()
