"""What audit and the companion constraints claim about TensorFlow's own requirements, checked
against the real index (network): the Requires-Dist of every TensorFlow release on PyPI, read
from the METADATA member of its Linux x86_64 wheel with HTTP range requests (the zip's central
directory, then that one member; no wheel is downloaded). PyPI's per-release JSON API answered
404 from this project's machines on 2026-12-01, the simple API and the files did not.

* data/constraints.yaml: a bound marked confirmed whose only sources are PyPI's (``pypi-*``) must
  be declared by every TensorFlow release it applies to, at least as strictly (every real version
  of the package that the bound excludes, the release's Requires-Dist excludes too); a bound
  marked unconfirmed must not be declared by all of them (it would be confirmed). Bounds that cite
  a report of the breakage itself go beyond what the wheels declare, on that evidence.
* data/tf-releases.yaml ``requires`` (audit's tf-family-skew): equal to the Requires-Dist of the
  release each row names.
"""

from __future__ import annotations

import re
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envfactory.catalog.loader import load_catalog
from envfactory.diagnose.audit import requires

pytestmark = pytest.mark.network

SIMPLE = "https://pypi.org/simple/{}/"
JSON_SIMPLE = {"Accept": "application/vnd.pypi.simple.v1+json"}
OLDEST = Version("1.13")


@cache
def _session() -> Any:
    import requests

    return requests.Session()


def _range(url: str, start: int, end: int) -> bytes:
    reply = _session().get(url, headers={"Range": f"bytes={start}-{end}"}, timeout=60)
    reply.raise_for_status()
    assert reply.status_code == 206, f"{url}: no range support ({reply.status_code})"
    return bytes(reply.content)


def wheel_metadata(url: str) -> str:
    """The ``*.dist-info/METADATA`` of a remote wheel, read through its zip central directory."""
    size = int(_session().head(url, timeout=60, allow_redirects=True).headers["Content-Length"])
    tail = _range(url, max(0, size - 65536), size - 1)
    end = tail.rfind(b"PK\x05\x06")
    assert end >= 0, f"{url}: no zip end record in the last 64 KiB"
    cd_size, cd_offset = struct.unpack("<II", tail[end + 12 : end + 20])
    directory = _range(url, cd_offset, cd_offset + cd_size - 1)
    pos = 0
    while pos + 46 <= len(directory):
        (method,) = struct.unpack("<H", directory[pos + 10 : pos + 12])
        csize, _, nlen, elen, clen = struct.unpack("<IIHHH", directory[pos + 20 : pos + 34])
        (local,) = struct.unpack("<I", directory[pos + 42 : pos + 46])
        name = directory[pos + 46 : pos + 46 + nlen].decode("utf-8")
        pos += 46 + nlen + elen + clen
        if re.fullmatch(r"[^/]+\.dist-info/METADATA", name):
            head = _range(url, local, local + 30 + 4096 + csize)
            hlen, hextra = struct.unpack("<HH", head[26:30])
            data = head[30 + hlen + hextra : 30 + hlen + hextra + csize]
            raw = zlib.decompress(data, -15) if method == 8 else data
            return raw.decode("utf-8")
    raise AssertionError(f"{url}: no .dist-info/METADATA")


def _files(project: str) -> list[dict[str, Any]]:
    reply = _session().get(SIMPLE.format(project), headers=JSON_SIMPLE, timeout=60)
    reply.raise_for_status()
    return list(reply.json()["files"])


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _file_pattern(project: str) -> str:
    return re.sub(r"[-_.]+", "[-_.]", project)


@cache
def tf_wheels(project: str = "tensorflow") -> dict[Version, tuple[str, str, str]]:
    """Final releases (from 1.13 on) -> (wheel file name, URL, its CPython X.Y)."""
    out: dict[Version, tuple[str, str, str]] = {}
    for f in _files(project):
        m = re.fullmatch(
            rf"{_file_pattern(project)}-([\d.]+)-cp(\d)(\d+)m?-cp\d+m?u?-manylinux[\w.]*x86_64\.whl",
            f["filename"],
            re.I,
        )
        version = _version(m[1]) if m else None
        if m and version and version >= OLDEST and not f.get("yanked"):
            out.setdefault(version, (f["filename"], f["url"], f"{m[2]}.{m[3]}"))
    return dict(sorted(out.items()))


@cache
def declared(project: str = "tensorflow") -> dict[Version, dict[str, SpecifierSet]]:
    """Each release -> the specifier its Requires-Dist puts on each package (markers evaluated
    for Linux x86_64 and the wheel's Python, no extras)."""

    def one(item: tuple[Version, tuple[str, str, str]]) -> tuple[Version, dict[str, SpecifierSet]]:
        version, (_, url, python) = item
        env = {"python_version": python, "sys_platform": "linux", "platform_system": "Linux",
               "platform_machine": "x86_64", "extra": ""}  # fmt: skip
        specs: dict[str, SpecifierSet] = {}
        for line in wheel_metadata(url).splitlines():
            if not line.startswith("Requires-Dist: "):
                continue
            req = Requirement(line.split(": ", 1)[1])
            if req.marker is None or req.marker.evaluate(env):
                name = canonicalize_name(req.name)
                specs[name] = specs.get(name, SpecifierSet()) & req.specifier
        return version, specs

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(one, tf_wheels(project).items()))


@cache
def real_versions(project: str) -> tuple[Version, ...]:
    found = set()
    for f in _files(project):
        m = re.match(
            rf"{_file_pattern(project)}-([^-]+?)(?:\.tar\.gz|\.zip|-)", f["filename"], re.I
        )
        version = _version(m[1]) if m else None
        if version and not version.is_prerelease and not version.is_devrelease:
            found.add(version)
    return tuple(sorted(found))


def declares(release: Version, package: str, bound: SpecifierSet) -> bool:
    """Whether the release's own Requires-Dist excludes every real version ``bound`` excludes."""
    spec = declared()[release].get(canonicalize_name(package))
    if spec is None:
        return False
    excluded = [v for v in real_versions(package) if not bound.contains(v)]
    assert excluded, f"{package}{bound} excludes no real version: nothing to check"
    return all(not spec.contains(v, prereleases=True) for v in excluded)


def test_the_index_answers() -> None:
    wheels = tf_wheels()
    assert Version("2.11.1") in wheels and Version("2.6.0") in wheels, sorted(wheels)
    # The facts behind this stop's corrections (data/constraints.yaml notes).
    assert declared()[Version("2.11.1")]["wrapt"] == SpecifierSet(">=1.11.0")
    assert declared()[Version("2.12.0")]["wrapt"] == SpecifierSet("<1.15,>=1.11.0")
    assert declared()[Version("2.6.0")]["tensorboard"] == SpecifierSet("~=2.6")
    assert declared()[Version("2.6.0")]["keras"] == SpecifierSet("~=2.6")


def _cases() -> list[tuple[str, str, str, bool, tuple[str, ...]]]:
    return [
        (c.package, c.spec, c.tensorflow, c.confirmed, c.sources)
        for c in load_catalog().constraints
    ]


@pytest.mark.parametrize(
    ("package", "spec", "tensorflow", "confirmed", "sources"),
    _cases(),
    ids=[f"{p}{s}@tf{t}" for p, s, t, _, _ in _cases()],
)
def test_constraint_confirmation_matches_the_index(
    package: str, spec: str, tensorflow: str, confirmed: bool, sources: tuple[str, ...]
) -> None:
    releases = [v for v in declared() if SpecifierSet(tensorflow).contains(v)]
    assert releases, f"no TensorFlow release on PyPI in {tensorflow}"
    bound = SpecifierSet(spec)
    undeclared = [str(v) for v in releases if not declares(v, package, bound)]
    if confirmed and all(s.startswith("pypi-") for s in sources):
        assert not undeclared, (
            f"{package}{spec} for TF {tensorflow} is confirmed by PyPI only, but these releases "
            f"do not declare it: {undeclared}"
        )
    if not confirmed:
        assert undeclared, (
            f"{package}{spec} for TF {tensorflow} is declared by every release in range "
            f"({[str(v) for v in releases]}): mark it confirmed"
        )


@pytest.mark.parametrize("minor", sorted(requires()))
def test_family_requirements_are_the_releases_own(minor: str) -> None:
    row = requires()[minor]
    project, _, version = row.wheel.partition(" ")
    specs = declared(project)[Version(version)]
    for package, spec in row.specs.items():
        assert specs.get(canonicalize_name(package)) == SpecifierSet(spec), (minor, package)
