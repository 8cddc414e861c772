"""The compiled catalog: the records ``loader`` makes from ``envfactory/data/*.yaml``, pickled
into ``envfactory/data/catalog.pickle`` (and the GPU table of ``gpus.yaml`` into
``gpus.pickle``), so that a command reads the catalog in ~2 ms instead
of ~100 ms (importing libyaml and the reader, composing 97 KiB of YAML, checking every key and
building the records; docs/benchmarks.md).

The file is a cache of a load that passed every check, never a second source: its first line
(text) carries the sha256 of the YAML files it was made from and of the record classes' fields.
``read`` returns the records only when both match what is installed now; an edited data file
(``docs/closures.md`` tells users to edit ``constraints.yaml`` to override a bound) or a changed
model makes it stale, and the loader reads the YAML again, with its ``file:line`` errors.
tests/test_catalog_compiled.py holds the committed file to a fresh load of the YAML.

It is package data, installed with the package's modules and as trusted as they are; it is
never written outside the source tree (``python -m envfactory.catalog.compiled`` rewrites it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envfactory.catalog import model

MAGIC = b"envfactory compiled catalog v1"
REGENERATE = "python -m envfactory.catalog.compiled"
# The record classes each file's pickle holds (their fields are part of its fingerprint).
CATALOG_RECORDS: tuple[type, ...] = (
    model.Catalog,
    model.Combo,
    model.PlatformRoute,
    model.Uncovered,
    model.CondaPin,
    model.PipPin,
    model.Constraint,
    model.Fact,
    model.GpuTargets,
    model.Toolkit,
    model.Source,
)


def fingerprint(texts: Mapping[str, bytes], records: Sequence[type]) -> str:
    """sha256 over the data files (name and bytes, in order) and every record class's fields:
    what the pickled records depend on."""
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


def compiled_files() -> list[tuple[Path, bytes]]:
    """Each compiled file and the bytes it should hold, from a fresh, fully checked load."""
    from envfactory.catalog import gpus
    from envfactory.catalog.loader import COMPILED, DATA_DIR, DATA_FILES, load_from_texts

    texts = {name: (DATA_DIR / name).read_bytes() for name in DATA_FILES}
    catalog = load_from_texts(texts, str(DATA_DIR))
    gpu_texts = {gpus.DATA_FILE: (DATA_DIR / gpus.DATA_FILE).read_bytes()}
    table = gpus.load_table(gpu_texts[gpus.DATA_FILE].decode("utf-8"), gpus.DATA_FILE)
    return [
        (COMPILED, dumps(catalog, texts, CATALOG_RECORDS)),
        (gpus.COMPILED, dumps(table, gpu_texts, gpus.RECORDS)),
    ]


def main() -> int:
    """Rewrite the compiled files from the YAML files (fully checked)."""
    for path, new in compiled_files():
        old = path.read_bytes() if path.is_file() else b""
        if new == old:
            sys.stdout.write(f"{path} is up to date\n")
            continue
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(new)
        tmp.replace(path)
        sys.stdout.write(f"wrote {path} ({len(new)} bytes)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
