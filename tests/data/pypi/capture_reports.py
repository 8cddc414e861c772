"""Re-capture the real PyPI metadata the offline wheel folder is built from (needs network).

    .venv/bin/python tests/data/pypi/capture_reports.py

For each target it asks uv, through envfactory's own pip adapter (``lock_target``), to resolve
the combo's pip requirement against pypi.org for the target platform and Python, with the combo's
companion constraints and what the combo's conda side provides (numpy, setuptools, ...) added as
requirements so their files are captured too. For every locked file it keeps: name, version, file
name, URL, sha256 (as the index lists them) and, read from the real file's metadata (PEP 658
``.metadata`` where the index serves it, else the wheel's ``*.dist-info/METADATA`` through HTTP
range requests, else an sdist's ``PKG-INFO``), Requires-Python and Requires-Dist.
Name targets to re-capture only those (``capture_reports.py tf23-cuda101-win-64``); the default is
all of them.

Two sets: ``TARGETS`` (hand-made, with what their test channel's conda side provides; one wheel
folder is built from all of them, tests/conftest.py ``test_channels``) written here, and every
other combo and platform with a pip route (``catalog_targets``: default Python, the route's glibc,
nothing provided but python and pip) written to ``catalog/``, one wheel folder each
(tests/test_mirror_combos.py). The ``catalog/`` reports were captured on 2026-12-03.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import requests

from envfactory.catalog.loader import load_catalog
from envfactory.render.environment import environment_spec
from envfactory.solve.pypi import PipTarget, lock_target

HERE = Path(__file__).parent
# key: (combo, requirement, platform, python, what the conda side provides)
TARGETS = {
    "tf114-cuda100-linux-64": (
        "tf114-cuda100",
        "tensorflow-gpu==1.14.0",
        "linux-64",
        "3.7",
        ("numpy==1.16.4",),
    ),
    "tf114-cuda100-win-64": (
        "tf114-cuda100",
        "tensorflow-gpu==1.14.0",
        "win-64",
        "3.7",
        ("numpy==1.16.4",),
    ),
    # tf23-cuda101 has no conda numpy (pip resolves numpy too); its conda side brings pip with
    # the test channel's conda-forge setuptools 65.5.1 and wheel 0.38.4 (the pangeo records).
    "tf23-cuda101-win-64": (
        "tf23-cuda101",
        "tensorflow==2.3.0",
        "win-64",
        "3.8",
        ("setuptools==65.5.1", "wheel==0.38.4"),
    ),
}


Target = tuple[str, "str | tuple[str, ...]", str, str, tuple[str, ...]]


def catalog_targets() -> dict[str, Target]:
    """Every other combo and platform whose route has a pip side, with its default Python and
    nothing provided by the conda side but python and pip (the stub channel of
    ``channel_builder.catalog_packages`` brings no Python library): the reports the
    every-combo mirror test (tests/test_mirror_combos.py) locks against."""
    from envfactory.render.environment import environment_spec

    out: dict[str, Target] = {}
    for combo in load_catalog().combos.values():
        for platform in combo.platforms:
            spec = environment_spec(combo, platform)
            key = f"{combo.name}-{platform}"
            if spec.pip and key not in TARGETS:
                out[key] = (combo.name, tuple(spec.pip_requirements()), platform, spec.python, ())
    return out


_session = requests.Session()


class _RangeFile(io.RawIOBase):
    """A remote file read with HTTP range requests, enough for ``zipfile``."""

    def __init__(self, url: str) -> None:
        self.url = url
        head = _session.head(url, allow_redirects=True, timeout=60)
        self.size = int(head.headers["content-length"])
        self.pos = 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.size - self.pos)
        if n <= 0:
            return 0
        end = self.pos + max(n, 1 << 16) - 1
        data = _session.get(self.url, headers={"Range": f"bytes={self.pos}-{end}"}, timeout=60)
        chunk = data.content[:n]
        buffer[: len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)


def metadata_text(url: str) -> str:
    if url.endswith(".whl"):
        direct = _session.get(url + ".metadata", timeout=60)
        if direct.ok:
            return direct.text
        with zipfile.ZipFile(io.BufferedReader(_RangeFile(url), 1 << 16)) as wheel:
            name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            return wheel.read(name).decode("utf-8")
    body = _session.get(url, timeout=60).content
    if url.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            name = min((n for n in archive.namelist() if n.endswith("PKG-INFO")), key=len)
            return archive.read(name).decode("utf-8")
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        member = min(
            (m for m in archive.getmembers() if m.name.endswith("PKG-INFO")),
            key=lambda m: len(m.name),
        )
        handle = archive.extractfile(member)
        assert handle is not None
        return handle.read().decode("utf-8")


def capture(key: str) -> dict[str, object]:
    combo_name, requirement, platform, python, provided = {**TARGETS, **catalog_targets()}[key]
    combo = load_catalog().combo(combo_name)
    requirements = (requirement,) if isinstance(requirement, str) else tuple(requirement)
    virtual = environment_spec(combo, platform).virtual_packages  # type: ignore[arg-type]
    target = PipTarget(
        requirements=(*requirements, *provided),
        platform=platform,  # type: ignore[arg-type]
        python=python,
        glibc=virtual.get("__glibc"),
        constraints=combo.constraints_for(platform),  # type: ignore[arg-type]
    )
    files = []
    for pkg in lock_target(target):
        meta = Parser().parsestr(metadata_text(pkg.url))
        files.append(
            {
                "name": meta["Name"],
                "version": pkg.version,
                "filename": pkg.filename,
                "url": pkg.url,
                "sha256": pkg.sha256,
                "requires_python": meta.get("Requires-Python"),
                "requires_dist": meta.get_all("Requires-Dist") or [],
            }
        )
    return {
        "requirement": requirement if isinstance(requirement, str) else list(requirement),
        "platform": platform,
        "python": python,
        "constraint": "\n".join(provided),
        "companion_constraints": [c.requirement for c in combo.constraints],
        "wheels": sorted(files, key=lambda d: str(d["name"]).lower()),
    }


def main(keys: list[str]) -> None:
    """The hand-made targets' reports go to this folder (one shared wheel folder is built from
    them); the catalog's to ``catalog/`` (one wheel folder per combo and platform)."""
    for key in keys or [*TARGETS, *catalog_targets()]:
        folder = HERE if key in TARGETS else HERE / "catalog"
        folder.mkdir(exist_ok=True)
        (folder / f"{key}.json").write_text(json.dumps(capture(key), indent=1) + "\n")
        print(key, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
