"""Compiled data files: the records a loader makes from one of the package's YAML files,
pickled next to it, so that a command reads them in ~2 ms instead of importing libyaml and the
reader, composing the YAML, checking every key and building the records (the catalog: ~100 ms;
docs/benchmarks.md).

A compiled file is a cache of a load that passed every check, never a second source: its first
line (text) carries the sha256 of the YAML files it was made from and of the record classes'
fields. ``read`` returns the records only when both match what is installed now; an edited data
file (docs/closures.md tells users to edit ``constraints.yaml`` to override a bound) or a changed
model makes it stale, and the owner loads the YAML again, with its ``file:line`` errors.

``DATA_DIR`` is where every data file of the package is found. The owners:
``catalog/loader.py`` (``data/catalog.pickle``), ``catalog/gpus.py`` (``data/gpus.pickle``) and
``diagnose/explain.py`` (``data/explain-patterns.pickle``), each through its ``DATA`` (a
``CompiledData``). The files are package data, installed with the
modules and as trusted as they are, and are never written outside the source tree:
``scripts/compile-data`` rewrites them, and tests/test_compiled_data.py holds them to a fresh
load of the YAML.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# The package's own data files (envfactory/data), the one place that locates them: next to the
# modules in every install (a wheel is unpacked, never imported from a zip);
# importlib.resources would cost 10-20 ms of imports on every command.
DATA_DIR = Path(__file__).resolve().parent / "data"

MAGIC = b"envfactory compiled data v1"
REGENERATE = "scripts/compile-data"


def fingerprint(texts: Mapping[str, bytes], records: Sequence[type]) -> str:
    """sha256 over the data files (name and bytes, in order) and every record class's fields
    (dataclasses): what the pickled records depend on."""
    digest = hashlib.sha256()
    for name, data in texts.items():
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    for cls in records:
        fields = ",".join(f"{f.name}:{f.type}" for f in dataclasses.fields(cls))
        digest.update(f"{cls.__module__}.{cls.__qualname__}({fields})\0".encode())
    return digest.hexdigest()


def _header(key: str) -> bytes:
    return b"%s sha256=%s; regenerate with: %s\n" % (MAGIC, key.encode(), REGENERATE.encode())


def read(path: Path, texts: Mapping[str, bytes], records: Sequence[type]) -> Any:
    """The compiled records, or None when the file is missing or was made from other data
    files or another model (then the caller loads the YAML)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head, _, body = data.partition(b"\n")
    if head + b"\n" != _header(fingerprint(texts, records)):
        return None
    return pickle.loads(body)  # package data, made by dumps() from a fully checked load


def dumps(value: object, texts: Mapping[str, bytes], records: Sequence[type]) -> bytes:
    """The file's bytes: the text header, then the records (pickle protocol 5; the same
    records give the same bytes whatever the hash seed)."""
    return _header(fingerprint(texts, records)) + pickle.dumps(value, protocol=5)


@dataclass(frozen=True)
class CompiledData(Generic[T]):
    """One compiled file: where it lives, the YAML files it caches, the record classes it
    holds, the type of what it holds, and the checked loader of those files (given their
    bytes by name)."""

    path: Path
    sources: tuple[Path, ...]
    records: tuple[type, ...]
    kind: type[T]
    load_yaml: Callable[[Mapping[str, bytes]], T]

    def _texts(self) -> dict[str, bytes]:
        return {source.name: source.read_bytes() for source in self.sources}

    def load(self) -> T:
        """The compiled records while they were made from these very files, else the YAML."""
        texts = self._texts()
        value = read(self.path, texts, self.records)
        return value if isinstance(value, self.kind) else self.load_yaml(texts)

    def form(self) -> tuple[Path, bytes]:
        """The file and the bytes it should hold, from a fresh, fully checked load."""
        texts = self._texts()
        return self.path, dumps(self.load_yaml(texts), texts, self.records)
