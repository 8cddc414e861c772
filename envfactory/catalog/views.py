"""Plain-data views of a combo, for ``list --json``, ``show --json`` and the human tables."""

from __future__ import annotations

from typing import Any

from envfactory.catalog.model import (
    ROUTE_TITLES,
    Catalog,
    Combo,
    CondaPin,
    Fact,
    PipPin,
    PlatformRoute,
    os_of,
)


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
            "declared": _declared_view(route, combo.python_default, platform),
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
    constraints = []
    for c in combo.constraints:
        cite(c.sources)
        view: dict[str, Any] = {
            "kind": c.kind,
            "package": c.package,
            "spec": c.spec,
            "requirement": c.requirement,
            "conda_spec": c.conda_spec,
            "tensorflow": c.tensorflow,
            "confirmed": c.confirmed,
            "sources": list(c.sources),
        }
        if c.not_channels:
            view["not_for_conda_builds_of"] = list(c.not_channels)
        if c.note:
            view["note"] = c.note
        constraints.append(view)
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
        "constraints": constraints,
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


def _declared_view(route: PlatformRoute, python: str, platform: str) -> dict[str, Any] | None:
    """The bounds a pip TensorFlow pin of this route declares itself (its wheel's Requires-Dist
    for the combo's default Python on this platform; data/tf-requires.json)."""
    from envfactory.catalog import tfmeta

    for pin in route.pip:
        name, _, version = pin.requirement.partition("==")
        if name.strip().lower() not in tfmeta.DISTRIBUTIONS or not version:
            continue
        found = tfmeta.declared(name.strip(), version.strip(), python, platform)
        if not found:
            continue
        return {
            "kind": "declared",
            "distribution": name.strip(),
            "version": version.strip(),
            "python": python,
            "source": found[0].source,
            "requirements": [str(d.requirement) for d in found],
        }
    return None


# "tf2.10", "tensorflow 2.10", "TF-2.10.1", "2.10": a TensorFlow version as users write it,
# before any CUDA part ("tf114-cuda10"); "tf210", "tf114": the catalog's own compact spelling.
