"""NVIDIA GPUs and their compute capabilities: the table in ``data/gpus.yaml`` and name lookup.

Names are matched tolerantly: ``RTX 3080``, ``rtx3080``, ``GeForce RTX 3080``, ``NVIDIA GeForce
RTX 3080`` and the ``nvidia-smi`` form ``NVIDIA A100-SXM4-80GB`` all find their row. A
``Ti``/``SUPER`` variant missing from the table resolves to its base model of the same
generation, and says so.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from envfactory.compiled import DATA_DIR, CompiledData
from envfactory.errors import CatalogError, UserInputError, nearest

DATA_FILE = "gpus.yaml"
COMPILED = DATA_DIR / "gpus.pickle"

_CC = re.compile(r"^(\d{1,2})\.(\d)$")


@dataclass(frozen=True, order=True)
class Capability:
    """A compute capability such as 9.0; ordered by (major, minor)."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def sm(self) -> str:
        """The nvcc spelling without the dot: ``90`` for 9.0 (as in ``sm_90``)."""
        return f"{self.major}{self.minor}"


def parse_capability(text: str) -> Capability:
    """``"8.6"`` -> Capability(8, 6); a bad value is a UserInputError."""
    match = _CC.match(text.strip())
    if not match:
        raise UserInputError(
            f"'{text}' is not a compute capability",
            "write it as MAJOR.MINOR, e.g. --cc 8.6 (see https://developer.nvidia.com/cuda-gpus)",
        )
    return Capability(int(match[1]), int(match[2]))


@dataclass(frozen=True)
class GpuModel:
    name: str
    cc: Capability
    arch: str
    source: str
    confirmed: bool


@dataclass(frozen=True)
class GpuMatch:
    """The row a name resolved to; ``note`` says when the match was not exact."""

    query: str
    model: GpuModel
    note: str | None = None


# Words that never tell two models apart: vendor and product-line words, board and memory
# variants as nvidia-smi prints them ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3").
_NOISE = re.compile(
    r"^(nvidia|geforce|tesla|quadro|gpu|laptop|mobile|notebook|pcie|sxm\d?|nvl|hbm\d?e?|"
    r"\d+gb|max|q|edition|generation|workstation|server|dgx|spark|design)$"
)
# Qualifiers that name a variant of the same chip generation.
_VARIANT = frozenset({"ti", "super"})


def _tokens(name: str) -> tuple[str, ...]:
    """The words that tell models apart, each split where letters meet digits: users type
    ``rtx3080``, ``RTX3080Ti`` and ``RTX 3080 Ti`` for the same card."""
    words = (t for t in re.findall(r"[a-z0-9]+", name.lower()) if not _NOISE.match(t))
    return tuple(part for word in words for part in re.findall(r"[a-z]+|[0-9]+", word))


def _find(haystack: tuple[str, ...], needle: tuple[str, ...]) -> int:
    for i in range(len(haystack) - len(needle) + 1):
        if haystack[i : i + len(needle)] == needle:
            return i
    return -1


RECORDS: tuple[type, ...] = (GpuModel, Capability)


def load_table(text: str, path: str) -> tuple[GpuModel, ...]:
    """The rows of a GPU table file, checked (``path`` names it in errors)."""
    from envfactory.yamlio import YamlMap, YamlSeq, load_yaml  # only when gpus.yaml changed

    doc = load_yaml(path, text)
    if not isinstance(doc, YamlMap) or not isinstance(doc.get("gpus"), YamlSeq):
        raise CatalogError(f"{path}: top level must be 'gpus:' with a list of rows")
    models: list[GpuModel] = []
    allowed = {"names", "cc", "arch", "source", "confirmed"}
    for row in doc["gpus"]:
        line = row.line if isinstance(row, YamlMap) else "?"
        if not isinstance(row, YamlMap) or set(row) != allowed:
            raise CatalogError(
                f"{path}:{line}: a GPU row needs exactly the keys {', '.join(sorted(allowed))}"
            )
        match = _CC.match(str(row["cc"]))
        if not match or not isinstance(row["cc"], str):
            raise CatalogError(f"{path}:{line}: cc must be a quoted 'MAJOR.MINOR' string")
        cc = Capability(int(match[1]), int(match[2]))
        models.extend(
            GpuModel(str(n), cc, str(row["arch"]), str(row["source"]), bool(row["confirmed"]))
            for n in row["names"]
        )
    return tuple(models)


def _load_yaml(texts: Mapping[str, bytes]) -> tuple[GpuModel, ...]:
    return load_table(texts[DATA_FILE].decode("utf-8"), DATA_FILE)


DATA = CompiledData(COMPILED, (DATA_DIR / DATA_FILE,), RECORDS, tuple, _load_yaml)


@functools.cache
def gpu_table() -> tuple[GpuModel, ...]:
    """Every named GPU in the shipped table, in file order: the compiled rows
    (``envfactory/compiled.py``) while they were made from this very file, else the YAML."""
    return DATA.load()


def resolve_gpu(name: str, table: tuple[GpuModel, ...] | None = None) -> GpuMatch:
    """Find the table row for a GPU name; an unknown or ambiguous name is a UserInputError."""
    rows = gpu_table() if table is None else table
    query = _tokens(name)
    if not query:
        raise UserInputError(f"'{name}' is not a GPU name", "give a model such as 'RTX 3080'")
    # (distance, leftover variant words, row): the row's words inside the query, or the query
    # inside the row's words (a short query such as "3080" or "A6000").
    found: list[tuple[int, tuple[str, ...], GpuModel]] = []
    core = tuple(t for t in query if t not in _VARIANT)
    for row in rows:
        key = _tokens(row.name)
        at = _find(query, key)
        if at >= 0:
            rest = query[:at] + query[at + len(key) :]
            if all(t in _VARIANT for t in rest):
                found.append((len(rest), rest, row))
        elif _find(key, query) >= 0:
            found.append((len(key) - len(query), (), row))
        elif core and core != query and _find(key, core) >= 0:
            # "3080 ti": a short query with a variant the table has no row for
            variants = tuple(t for t in query if t in _VARIANT)
            found.append((len(key) - len(core) + len(variants), variants, row))
    if not found:
        hint = "give its compute capability instead, e.g. --cc 8.6 (https://developer.nvidia.com/cuda-gpus)"
        close = nearest(name, [m.name for m in rows])
        if close:
            hint = f"did you mean {', '.join(close)}? or {hint}"
        raise UserInputError(f"unknown GPU '{name}'", hint)
    best = min(d for d, _, _ in found)
    top = [(rest, row) for d, rest, row in found if d == best]
    if len({row.cc for _, row in top}) > 1:
        names = ", ".join(f"{row.name} ({row.cc})" for _, row in top)
        raise UserInputError(
            f"GPU name '{name}' is ambiguous: {names}", "give the full model name, or --cc X.Y"
        )
    rest, row = top[0]
    note = None
    if rest:
        note = (
            f"no row for the {' '.join(rest).upper()} variant; used {row.name} "
            f"(same generation, compute capability {row.cc})"
        )
    elif _tokens(row.name) != query:
        note = f"'{name}' read as {row.name}"
    return GpuMatch(query=name, model=row, note=note)
