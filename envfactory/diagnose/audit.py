"""Audit an environment a user already has: read it, find what is out of step, name the closest
catalog combo and the ``envfactory.yaml`` entry that rebuilds it properly.

Reads an ``environment.yml`` / ``conda env export``, ``conda list --explicit`` (or any explicit
lock), ``conda list`` and ``conda list --export`` output, a ``conda-lock.yml``, a ``pip freeze``
or a live prefix (its ``conda-meta/`` records and site-packages), each into one
:class:`Inventory` per platform. The checks are pure functions of an inventory and the catalog.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envfactory.catalog import tfmeta
from envfactory.catalog.model import Catalog, Combo, Constraint, Platform
from envfactory.diagnose.finding import Finding, count_problems
from envfactory.diagnose.probes import read_prefix_packages
from envfactory.errors import UserInputError
from envfactory.yamlio import load_yaml

Manager = Literal["conda", "pip"]
Kind = Literal[
    "environment.yml", "conda env export", "explicit", "conda list", "conda list --export",
    "conda-lock", "pip freeze", "requirements", "prefix",
]  # fmt: skip

MAX_INPUT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    """The exact version, or '' when the file gives only a range (environment.yml)."""
    build: str
    channel: str
    manager: Manager
    marker: str = ""
    """a requirements line's environment marker ('platform_system == "Darwin"')"""


@dataclass(frozen=True)
class Inventory:
    source: str
    kind: Kind
    platform: Platform | str | None
    packages: tuple[Package, ...]
    name: str | None = None
    skipped: tuple[str, ...] = ()
    """lines that could not be judged (reported, then left out)"""
    complete: bool = True
    """every installed package is listed (an export, a lock, a listing); False for a file of
    requests (environment.yml without builds, requirements), where a missing dependency is
    normal"""

    def conda(self, name: str) -> Package | None:
        key = _canonical(name)
        return next(
            (p for p in self.packages if p.manager == "conda" and _canonical(p.name) == key), None
        )

    def pip(self, name: str) -> Package | None:
        key = _canonical(name)
        return next(
            (p for p in self.packages if p.manager == "pip" and _canonical(p.name) == key), None
        )

    def any(self, name: str) -> Package | None:
        return self.conda(name) or self.pip(name)


BoundKind = Literal["declared", "breakage", "preference", ""]
Scope = Literal["tensorflow", "other"]
Verdict = Literal["consistent", "inconsistent", "unknown"]


@dataclass(frozen=True, kw_only=True)
class AuditFinding(Finding):
    """A ``Finding`` about an environment a user has, with its cause and, for a bound, where the
    bound comes from."""

    fix: str
    cause: str
    subject: str = ""
    """the package the finding is about, where it is about one"""
    kind: BoundKind = ""
    """for a bound: declared by the release, a known breakage (lock preferences are never
    findings)"""
    source: str = ""
    scope: Scope = "tensorflow"
    """'other': about something beside TensorFlow (a CPU PyTorch), kept out of TF's verdict"""

    @property
    def key(self) -> str:
        """``id:subject`` (or the id): what the corpus expectations name."""
        return f"{self.id}:{self.subject}" if self.subject else self.id

    def to_json(self) -> dict[str, str]:
        return {
            "id": self.id,
            "severity": self.severity,
            "message": self.message,
            "cause": self.cause,
            "fix": self.fix,
            "subject": self.subject,
            "kind": self.kind,
            "source": self.source,
            "scope": self.scope,
        }


@dataclass(frozen=True)
class AuditReport:
    inventory: Inventory
    tensorflow: str | None
    findings: tuple[AuditFinding, ...]
    closest: str | None
    closest_why: str | None
    manifest: str | None
    unchecked: str | None = None
    """why the TensorFlow verdict is 'unknown' (no exact TF version, a release no table knows)"""

    @property
    def problems(self) -> int:
        return count_problems(self.findings)

    @property
    def verdict(self) -> Verdict:
        """TensorFlow's verdict: findings about other things (scope 'other') do not count."""
        if any(f.severity == "problem" and f.scope == "tensorflow" for f in self.findings):
            return "inconsistent"
        return "unknown" if self.unchecked else "consistent"

    def to_json(self) -> dict[str, Any]:
        """``{"source", "format", "platform", "packages", "tensorflow", "findings": [{"id",
        "severity", "message", "cause", "fix"}], "problems", "closest_combo", "closest_why",
        "manifest"}``; findings sorted by severity, then id."""
        return {
            "source": self.inventory.source,
            "format": self.inventory.kind,
            "platform": self.inventory.platform,
            "packages": len(self.inventory.packages),
            "tensorflow": self.tensorflow,
            "findings": [f.to_json() for f in self.findings],
            "problems": self.problems,
            "verdict": self.verdict,
            "unchecked": self.unchecked,
            "closest_combo": self.closest,
            "closest_why": self.closest_why,
            "manifest": self.manifest,
        }


# --------------------------------------------------------------------------------------------
# Reading


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _from_filename(filename: str) -> tuple[str, str, str] | None:
    """``tensorflow-base-2.4.1-gpu_py38h29c2da4_0.conda`` -> (name, version, build)."""
    stem = re.sub(r"\.(tar\.bz2|conda)$", "", filename)
    parts = stem.rsplit("-", 2)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def _channel_of(url: str) -> str:
    """The channel of a package URL: conda-forge, pkgs/main, nvidia, pytorch, ..."""
    path = PurePosixPath(unquote(urlparse(url).path)).parts
    # .../<channel parts>/<subdir>/<file>; anaconda.org tokens (/t/<TOKEN>/) are skipped.
    parts = [p for p in path[1:-2] if p != "/"]
    if len(parts) >= 2 and parts[0] == "t":
        parts = parts[2:]
    return "/".join(parts) or urlparse(url).netloc


def _platform_of_url(url: str) -> str | None:
    parts = PurePosixPath(urlparse(url).path).parts
    return parts[-2] if len(parts) >= 2 and parts[-2] != "noarch" else None


def _explicit(text: str, source: str) -> list[Inventory]:
    packages = []
    skipped = []
    platform = None
    header = re.search(r"^# platform: (\S+)", text, re.M)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line == "@EXPLICIT":
            continue
        url = line.split("#", 1)[0].strip()
        # conda-lock and conda percent-encode '!' (epochs: x264-1%21164.3095-...) in URLs
        parsed = _from_filename(unquote(PurePosixPath(urlparse(url).path).name))
        if parsed is None:
            skipped.append(line)
            continue
        platform = platform or _platform_of_url(url)
        packages.append(Package(parsed[0], parsed[1], parsed[2], _channel_of(url), "conda"))
    return [
        Inventory(
            source, "explicit", header[1] if header else platform, tuple(packages),
            skipped=tuple(skipped),
        )
    ]  # fmt: skip


def _spec(text: str) -> tuple[str, str, str, str]:
    """A dependency string of an environment file -> (channel, name, version, build). A conda
    ``name=1.15`` means any 1.15.x: its version is ``1.15.*`` (a minor known, no exact version)."""
    channel = ""
    if "::" in text:
        channel, text = text.split("::", 1)
    text = text.strip()
    m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", text)
    if m is None:
        return channel, text, "", ""
    name, rest = m[1], m[2].replace(" ", "")
    if rest.startswith("=="):
        version, _, build = rest[2:].partition("=")
        return channel, name, version if "*" not in version else "", build
    if rest.startswith("="):
        version, _, build = rest[1:].partition("=")
        # 'conda env export --no-builds' writes name=1.19.2 (exact in practice); a user's
        # name=1.15 asks for any 1.15.x
        if build or not version or version.count(".") >= 2 or not version[-1:].isdigit():
            return channel, name, version, build
        return channel, name, version if version.endswith("*") else f"{version}.*", ""
    return channel, name, "", ""


OPTION_LINE = re.compile(
    r"^(-r|--requirement|-c|--constraint|-i|--index-url|--extra-index-url|-f|--find-links|"
    r"--trusted-host|--pre|--no-binary|--only-binary|--prefer-binary|--require-hashes|"
    r"--no-index|--use-feature|--upgrade|-U)\b"
)
WHEEL_URL = re.compile(r"([A-Za-z0-9_.]+)-(\d[^-/]*)-[^-/]+-[^-/]+-[^-/]+\.whl$")


def _requirement(line: str) -> tuple[Package | None, str | None]:
    """One line of a requirements file or an environment file's pip list -> (the package, or
    None; the line itself when it cannot be judged). Option lines (-r, --index-url, ...) and
    comments are neither; ``--hash`` options and a trailing ``\\`` are dropped."""
    text = re.split(r"(^|\s)#", line, maxsplit=1)[0].strip().rstrip("\\").strip()
    text = re.sub(r"\s--hash[= ]\S+", "", f" {text}").strip()
    if not text or OPTION_LINE.match(text):
        return None, None
    if text.startswith(("-e", "--editable")):
        return None, line.strip()
    wheel = WHEEL_URL.search(text.split("#", 1)[0])
    if "://" in text and " @ " not in text and "@" not in text.split("://", 1)[0]:
        if wheel:  # a bare wheel URL names its project and version
            return Package(_canonical(wheel[1]), wheel[2], "", "pypi", "pip"), None
        return None, line.strip()
    try:
        req = Requirement(text)
    except InvalidRequirement:
        # 'tensorflow-gpu=1.15' (conda's form, which pip refuses), 'name = 1.2'
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*=\s*([0-9][^\s=;,]*)$", text)
        if m:
            return Package(_canonical(m[1]), m[2], "", "pypi", "pip"), None
        return None, line.strip()
    version = ""
    specs = list(req.specifier)
    pins = [s for s in specs if s.operator in ("==", "===")]
    if pins:
        version = pins[0].version  # '2.10.*' stays a wildcard: the minor, not one release
    elif len(specs) == 1 and specs[0].operator == "~=" and specs[0].version.count(".") == 2:
        version = specs[0].version.rsplit(".", 1)[0] + ".*"  # ~=2.3.0: any 2.3.x
    elif req.url and (wheel := WHEEL_URL.search(req.url)):
        version = wheel[2]
    marker = str(req.marker) if req.marker else ""
    return Package(_canonical(req.name), version, "", "pypi", "pip", marker), None


def _pip_line(text: str) -> Package | None:
    return _requirement(text)[0]


def _requirements(text: str, source: str) -> list[Inventory]:
    packages, skipped = [], []
    for line in text.splitlines():
        pkg, bad = _requirement(line)
        if pkg:
            packages.append(pkg)
        if bad:
            skipped.append(bad)
    pinned = packages and all(p.version for p in packages) and not skipped
    kind: Kind = "pip freeze" if pinned else "requirements"
    return [Inventory(source, kind, None, tuple(packages), skipped=tuple(skipped), complete=False)]


def _env_file(doc: Mapping[str, Any], source: str) -> list[Inventory]:
    deps = doc.get("dependencies") or []
    if not isinstance(deps, list):
        raise UserInputError(f"{source}: 'dependencies' must be a list")
    packages: list[Package] = []
    skipped: list[str] = []
    builds = 0
    for dep in deps:
        if isinstance(dep, Mapping) and isinstance(dep.get("pip"), list):
            for x in dep["pip"]:
                pkg, bad = _requirement(str(x))
                if pkg:
                    packages.append(pkg)
                if bad:
                    skipped.append(bad)
        elif isinstance(dep, str):
            channel, name, version, build = _spec(dep)
            if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
                skipped.append(dep)
                continue
            builds += bool(build)
            packages.append(Package(name, version, build, channel, "conda"))
        elif dep is not None:
            skipped.append(str(dep))
    names = {p.name for p in packages if p.manager == "conda"}
    prefix = str(doc.get("prefix") or "")
    platform: str | None = None
    if {"vc", "vs2015_runtime", "ucrt", "vc14_runtime"} & names or re.match(
        r"^[A-Za-z]:\\", prefix
    ):
        platform = "win-64"
    elif {
        "_libgcc_mutex",
        "libgcc-ng",
        "ld_impl_linux-64",
        "libgcc",
        "_openmp_mutex",
    } & names or re.match(r"^/(home|opt|usr|root|data|scratch|mnt|srv)/", prefix):
        platform = "linux-64"
    elif prefix.startswith("/Users/"):
        platform = "osx-64"
    kind: Kind = "conda env export" if builds else "environment.yml"
    env_name = str(doc["name"]) if doc.get("name") else None
    conda = [p for p in packages if p.manager == "conda"]
    # an export (with or without builds) lists every package, each with its exact version
    exported = bool(builds) or (len(conda) >= 30 and all(p.version for p in conda))
    return [
        Inventory(
            source, kind, platform, tuple(packages), env_name, tuple(skipped),
            complete=exported,
        )
    ]  # fmt: skip


def _conda_lock(path: Path) -> list[Inventory]:
    """A conda-lock.yml, read by ``lockfile.read`` (held to conda-lock's models, checked as
    ``create`` checks it)."""
    from envfactory.lockfile.read import read_lock

    by_platform: dict[str, list[Package]] = {}
    for pkg in read_lock(path).packages:
        if pkg.manager == "pip":
            entry = Package(_canonical(pkg.name), pkg.version, "", "pypi", "pip")
        else:
            entry = Package(pkg.name, pkg.version, pkg.build, _channel_of(pkg.url), "conda")
        by_platform.setdefault(str(pkg.platform), []).append(entry)
    return [
        Inventory(str(path), "conda-lock", platform, tuple(pkgs))
        for platform, pkgs in sorted(by_platform.items())
    ]


def _conda_list(text: str, source: str) -> list[Inventory]:
    packages = []
    where = re.search(r"^# packages in environment at (.+):", text, re.M)
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        cols = line.split()
        if len(cols) < 3:
            continue
        name, version, build = cols[0], cols[1], cols[2]
        channel = cols[3] if len(cols) > 3 else ""
        if channel == "pypi" or build == "<pip>" or build.startswith("pypi_"):
            packages.append(Package(_canonical(name), version, "", "pypi", "pip"))
        else:
            packages.append(Package(name, version, build, channel, "conda"))
    platform = None
    if where:
        platform = "win-64" if re.match(r"^[A-Za-z]:\\", where[1]) else "linux-64"
    return [Inventory(source, "conda list", platform, tuple(packages))]


def _conda_export(text: str, source: str) -> list[Inventory]:
    """``conda list --export`` (``name=version=build`` lines, ``pypi_0`` builds came from pip)."""
    packages = []
    for line in text.splitlines():
        parts = line.strip().split("=")
        if line.startswith("#") or len(parts) != 3:
            continue
        name, version, build = parts
        if build.startswith("pypi_"):
            packages.append(Package(_canonical(name), version, "", "pypi", "pip"))
        else:
            packages.append(Package(name, version, build, "", "conda"))
    header = re.search(r"^# platform: (\S+)", text, re.M)
    return [
        Inventory(source, "conda list --export", header[1] if header else None, tuple(packages))
    ]


def _prefix(path: Path) -> list[Inventory]:
    if (
        not (path / "conda-meta").is_dir()
        and not any(path.glob("lib/python3*/site-packages"))
        and not (path / "Lib" / "site-packages").is_dir()
    ):
        raise UserInputError(
            f"{path} is neither a conda environment nor a virtual environment",
            "give a prefix with conda-meta/ or lib/pythonX.Y/site-packages, or an environment file",
        )
    found = read_prefix_packages(path)
    packages = [
        Package(name, found.conda[name], found.conda_builds.get(name, ""),
                found.conda_channels.get(name, ""), "conda")
        for name in sorted(found.conda)
    ]  # fmt: skip
    conda_names = {_canonical(p.name) for p in packages}
    packages += [
        Package(name, version, "", "pypi", "pip")
        for name, version in sorted(found.pip.items())
        if name not in conda_names  # conda's Python packages also carry a dist-info
    ]
    platform = "win-64" if (path / "Lib" / "site-packages").is_dir() else "linux-64"
    return [Inventory(str(path), "prefix", platform, tuple(packages), path.name)]


def _decode(data: bytes) -> str:
    """UTF-8 (with or without a BOM); UTF-16 as Windows PowerShell's '>' writes it (a BOM, or
    none: NUL bytes between ASCII letters); else the Windows code page, so a user name with an
    accent in a prefix path does not make the whole file unreadable. CRLF read as LF."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        text = data.decode("utf-16", errors="replace")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = data.decode("cp1252", errors="replace")
        if "\x00" in text[:4096]:
            odd = data[1::2][:2048].count(0) > data[0::2][:2048].count(0)
            text = data.decode("utf-16-le" if odd else "utf-16-be", errors="replace")
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def read_inventories(path: Path) -> list[Inventory]:
    """Every environment described by ``path``: one per platform of a multi-platform lock."""
    if path.is_dir():
        return _prefix(path)
    try:
        data = path.read_bytes()[: MAX_INPUT_BYTES + 1]
    except OSError as exc:
        raise UserInputError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise UserInputError(f"{path} is larger than {MAX_INPUT_BYTES // 2**20} MiB")
    text = _decode(data)
    source = str(path)
    if re.search(r"^@EXPLICIT\s*$", text, re.M):
        return _explicit(text, source)
    if re.search(r"^# packages in environment at ", text, re.M):
        return _conda_list(text, source)
    stripped = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if stripped and all(re.match(r"^[A-Za-z0-9_.\-]+=[^=\s]+=\S+$", ln.strip()) for ln in stripped):
        return _conda_export(text, source)
    if stripped and all(re.match(r"^[A-Za-z0-9_.\-\[\]]+\s*(==|===| @ )", ln) for ln in stripped):
        return _requirements(text, source)
    if re.search(r"^package:", text, re.M) and re.search(r"^metadata:", text, re.M):
        return _conda_lock(path)
    if re.search(r"^(dependencies|name|channels):", text, re.M):
        doc = load_yaml(source, text, "give an environment.yml, conda env export or conda-lock.yml")
        if isinstance(doc, Mapping) and "dependencies" in doc:
            return _env_file(doc, source)
    if stripped and all(len(ln.split()) >= 3 for ln in stripped):
        return _conda_list(text, source)
    found = _requirements(text, source)
    # a requirements file (a versioned line, or its usual name): what cannot be judged is
    # reported, not refused
    versioned = re.search(r"^\s*[A-Za-z0-9_.\-\[\]]+\s*(==|>=|<=|~=|!=|<|>|@)", text, re.M)
    # ... or a list of bare names (and options) that all parse, of more than one package or
    # named for requirements: tf_requirements.txt of 'numpy', 'tensorflow', ...
    listed = len(found[0].skipped) < len(found[0].packages) and (
        len(found[0].packages) > 1 or "requirement" in path.name.lower()
    )
    if found[0].packages and (versioned or listed):
        return found
    raise UserInputError(
        f"cannot tell what {path} is",
        "give an environment.yml / 'conda env export', 'conda list' (--explicit, --export) "
        "output, a conda-lock.yml, a 'pip freeze' or an environment's directory",
    )


# --------------------------------------------------------------------------------------------
# What the checks know


@dataclass(frozen=True)
class Release:
    pythons: tuple[str, ...]
    cuda: str
    cudnn: str
    source: str


@dataclass(frozen=True)
class Requires:
    """What a release's own wheel requires of its companions (its PyPI Requires-Dist)."""

    wheel: str
    specs: Mapping[str, str]


@functools.cache
def _releases_doc() -> Any:
    path = resources.files("envfactory") / "data" / "tf-releases.yaml"
    return load_yaml("tf-releases.yaml", path.read_text(encoding="utf-8"))


@functools.cache
def releases() -> Mapping[tuple[str, str], Release]:
    """(TF major.minor, 'linux' | 'windows') -> the tested configuration (data/tf-releases.yaml)."""
    out = {}
    for minor, per_os in _releases_doc()["releases"].items():
        for os_name, row in per_os.items():
            if os_name == "requires":
                continue
            out[str(minor), str(os_name)] = Release(
                tuple(str(p) for p in row["pythons"]),
                str(row["cuda"]),
                str(row["cudnn"]),
                str(row["source"]),
            )
    return out


@functools.cache
def requires() -> Mapping[str, Requires]:
    """TF major.minor -> the tensorboard / tensorflow-estimator / keras its wheel requires."""
    out = {}
    for minor, per_os in _releases_doc()["releases"].items():
        row = per_os.get("requires")
        if row:
            specs = {str(k): str(v) for k, v in row.items() if k != "from"}
            out[str(minor)] = Requires(str(row["from"]), specs)
    return out


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _minor(text: str) -> str:
    return ".".join(str(x) for x in _v(text)[:2])


TF_PIP = tfmeta.DISTRIBUTIONS
TF_NAMES = ("tensorflow-base", *TF_PIP)
CUDA_LIBRARY = re.compile(
    r"^(cudatoolkit|cudnn|cupti|cuda-(cudart|nvrtc|nvcc|cupti|version|libraries|runtime)"
    r"|libcu(blas|fft|rand|solver|sparse)|libnvjitlink)$"
)
CONDA_NAME_OF = {"flatbuffers": "python-flatbuffers", "libclang": None, "clang": None}
"""PyPI names whose conda namesake is another thing (conda's flatbuffers and libclang are the C++
libraries; the Python package is python-flatbuffers, or not on conda): -> the conda name of the
Python package, or None."""
SAME_MODULE = {"tensorflow-gpu-estimator": "tensorflow-estimator"}
"""A requirement's name -> the distribution that installs the same import package (TF 2.1's GPU
wheels declare tensorflow-gpu-estimator; tensorflow-estimator installs the same
tensorflow_estimator, and is what users have)."""
SHARED_NAMES = ("keras", "numpy", "h5py", "protobuf", "tensorboard", "tensorflow-estimator")
"""Packages both conda and pip install into one site-packages, under one name."""
GPU_EVIDENCE = ("cudatoolkit", "cudnn", "cuda-cudart", "cuda-version", "tensorflow-gpu")


def _exact(pkg: Package | None) -> str | None:
    """The package's version when the file gives one exact version (not ``1.15.*``)."""
    if pkg is None or not pkg.version or "*" in pkg.version:
        return None
    try:
        Version(pkg.version)
    except InvalidVersion:
        return None
    return pkg.version


def _tf_package(inv: Inventory) -> Package | None:
    for name in TF_NAMES:
        for pkg in (inv.conda(name), inv.pip(name)):
            if pkg and pkg.version:
                return pkg
    return None


def _tf_version(inv: Inventory) -> str | None:
    pkg = _tf_package(inv)
    return pkg.version if pkg else None


def _is_gpu_build(build: str) -> bool:
    return bool(re.search(r"gpu|cuda", build, re.I))


def _cuda_of_build(build: str) -> str | None:
    """``cuda112py310h...`` -> 11.2; ``cuda120_py311`` -> 12.0; ``cuda92py36`` -> 9.2;
    ``cuda10.1_0`` (a defaults cudnn build) -> 10.1. conda-forge writes CUDA as its digits."""
    m = re.match(r"^cuda(\d+)\.(\d+)", build)
    if m:
        return f"{m[1]}.{m[2]}"
    m = re.match(r"^cuda(\d{2,3})(?=_|py|h)", build)
    if m:
        digits = m[1]
        return f"{digits[:-1]}.{digits[-1]}"
    return None


def _cuda_in_env(inv: Inventory) -> tuple[str, str] | None:
    """(CUDA version, package that says so): cudatoolkit, cuda-version or cuda-cudart."""
    for name in ("cudatoolkit", "cuda-version", "cuda-cudart"):
        pkg = inv.conda(name)
        if pkg and pkg.version:
            return pkg.version, name
    return None


def _python(inv: Inventory) -> str | None:
    pkg = inv.conda("python")
    return _minor(pkg.version) if pkg and pkg.version else None


def _os(platform: str | None) -> str:
    return "windows" if platform and platform.startswith("win") else "linux"


# --------------------------------------------------------------------------------------------
# Checks


def _tflow_variant(inv: Inventory) -> str | None:
    """The TensorFlow variant Anaconda's ``_tflow_select`` selects ('gpu', 'mkl', 'eigen'): its
    build string, or where a file gives no builds its version (tf-releases.yaml tflow_select)."""
    pkg = inv.conda("_tflow_select")
    if pkg is None:
        return None
    if pkg.build in ("gpu", "mkl", "eigen"):
        return pkg.build
    table = _releases_doc().get("tflow_select") or {}
    return str(table[pkg.version]) if pkg.version in table else None


def _check_cpu_build(inv: Inventory) -> list[AuditFinding]:
    gpu_libs = [n for n in GPU_EVIDENCE if inv.conda(n)]
    findings: list[AuditFinding] = []
    variant = _tflow_variant(inv)
    tf_conda = inv.conda("tensorflow") or inv.conda("tensorflow-base")
    if (
        variant in ("mkl", "eigen") and tf_conda and gpu_libs and not inv.conda("tensorflow-gpu")
        and not (tf_conda.build and _is_gpu_build(tf_conda.build))
    ):  # fmt: skip
        sel = inv.conda("_tflow_select")
        assert sel is not None
        findings.append(
            AuditFinding(
                "tf-cpu-build-with-cuda",
                "problem",
                f"_tflow_select {sel.version} selects Anaconda's {variant} (CPU-only) variant of "
                f"{tf_conda.name} {tf_conda.version}, next to {', '.join(gpu_libs)}",
                cause="Anaconda's tensorflow metapackage pins the tensorflow-base variant that "
                "_tflow_select names; only the gpu variant (_tflow_select 1.1.0 / 2.1.0) uses "
                "CUDA, so the CUDA packages beside this one are dead weight",
                fix="install tensorflow-gpu (or rebuild from the closest combo's lock, which pins "
                "the GPU build string)",
                source="anaconda-tflow-select",
            )
        )
    cuda_libs = [p for p in inv.packages if p.manager == "conda" and CUDA_LIBRARY.match(p.name)]
    for name in ("tensorflow-base", "tensorflow"):
        pkg = inv.conda(name)
        if pkg is None or not pkg.build or _is_gpu_build(pkg.build) or not gpu_libs or findings:
            continue
        if not re.match(r"^(mkl|eigen|cpu|py\d|h[0-9a-f]{7})", pkg.build) and pkg.build != "0":
            continue
        findings.append(
            AuditFinding(
                "tf-cpu-build-with-cuda",
                "problem",
                f"{name} {pkg.version} build {pkg.build} ({pkg.channel or 'unknown channel'}) is "
                f"a CPU build, next to {', '.join(gpu_libs)}",
                cause="TensorFlow uses the GPU only in a gpu_*/cuda* build; the CUDA packages "
                "beside "
                "this one are dead weight (a GPU metapackage over a CPU tensorflow-base, or a "
                "re-solve that swapped the build)",
                fix="rebuild from the closest combo's lock, which pins the GPU build string",
            )
        )
        break
    pip_tf = inv.pip("tensorflow-cpu") or (
        inv.pip("tensorflow")
        if (tf := inv.pip("tensorflow")) and _exact(tf) and _v(tf.version) < (2, 1)
        else None
    )
    if pip_tf and gpu_libs and not any(f.id == "tf-cpu-build-with-cuda" for f in findings):
        findings.append(
            AuditFinding(
                "tf-cpu-build-with-cuda",
                "problem",
                f"pip's {pip_tf.name} {pip_tf.version} is CPU-only, next to {', '.join(gpu_libs)}",
                cause="before TF 2.1 the GPU wheel is tensorflow-gpu; tensorflow-cpu never uses a "
                "GPU",
                fix="install the GPU wheel the combo names, or rebuild from the combo's lock",
            )
        )
    torch = inv.conda("pytorch")
    mutex = inv.conda("pytorch-mutex")
    cpu_torch = (torch and re.search(r"cpu", torch.build)) or (mutex and mutex.build == "cpu")
    if cpu_torch and (inv.conda("cudatoolkit") or any(p.name == "cuda-cudart" for p in cuda_libs)):
        what = f"pytorch {torch.version} build {torch.build}" if torch else "pytorch-mutex cpu"
        findings.append(
            AuditFinding(
                "pytorch-cpu-build-with-cuda",
                "problem",
                f"{what} is a CPU build, next to conda's CUDA libraries",
                cause="the solver picked PyTorch's CPU variant (no cuda* build matched the other "
                "pins), "
                "so PyTorch in this environment never uses the GPU",
                fix="pin the CUDA build (pytorch-cuda / a cuda* build string) or drop cudatoolkit",
                subject="pytorch",
                scope="other",
            )
        )
    return findings


def _check_family(inv: Inventory, tf: str) -> list[AuditFinding]:
    """tensorflow / -base / -gpu of one release; for a conda TensorFlow, tensorboard,
    tensorflow-estimator and keras inside what the same release's wheel requires
    (data/tf-releases.yaml; a pip TensorFlow's whole Requires-Dist is _check_declared's)."""
    findings: list[AuditFinding] = []
    for name in ("tensorflow-base", "tensorflow-gpu", "tensorflow"):
        pkg = inv.conda(name)
        if pkg and pkg.version and _minor(pkg.version) != _minor(tf):
            findings.append(_skew(name, pkg.version, tf, f"{name} is part of TensorFlow itself"))
    if inv.conda("tensorflow-base") is None and inv.conda("tensorflow") is None:
        return findings
    row = requires().get(_minor(tf))
    for name, spec in sorted(row.specs.items()) if row else ():
        version = _exact(inv.any(name))
        if version is None:
            continue
        try:
            ok = SpecifierSet(spec).contains(Version(version), prereleases=True)
        except (InvalidSpecifier, InvalidVersion):
            continue
        if not ok:
            assert row is not None
            findings.append(
                _skew(name, version, tf, f"{row.wheel} requires {name}{spec}", f"{name}{spec}")
            )
    return findings


def _skew(name: str, version: str, tf: str, why: str, want: str | None = None) -> AuditFinding:
    return AuditFinding(
        "tf-family-skew",
        "problem",
        f"{name} {version} does not match TensorFlow {tf} (declared: {why}, PyPI Requires-Dist)",
        cause="a mismatched one fails at import or at the first estimator/Keras call",
        fix=f"install {want or f'{name} {_minor(tf)}.x'}, or rebuild from the closest combo's lock",
        subject=name,
        kind="declared",
        source=f"{why} (PyPI Requires-Dist, data/tf-releases.yaml)",
    )


def _table_version(distribution: str, version: str) -> str | None:
    """The table's spelling of ``version`` (1.15 -> 1.15.0); a ``2.4.*`` request -> the newest
    2.4 release, which is what pip or conda installs for it today."""
    known = tfmeta.versions(distribution)
    if version.endswith("*"):
        prefix = _v(version)
        same = [k for k in known if _v(k)[: len(prefix)] == prefix and not re.search("[a-z]", k)]
        return max(same, key=Version) if same else None
    try:
        want = Version(version.split("+", 1)[0])
    except InvalidVersion:
        return None
    return next((k for k in known if Version(k) == want), None)


def _python_package(inv: Inventory, name: str) -> Package | None:
    """The installed Python distribution ``name`` (PyPI name), from pip or conda."""
    pip = inv.pip(name)
    if pip or name not in CONDA_NAME_OF:
        return pip or inv.conda(name)
    conda_name = CONDA_NAME_OF[name]
    return inv.conda(conda_name) if conda_name else None


def _check_declared(inv: Inventory) -> tuple[list[AuditFinding], bool]:
    """Every requirement a pip-installed TensorFlow distribution declares (its wheel's
    Requires-Dist, markers evaluated for this Python and platform; data/tf-requires.json),
    following tensorflow -> tensorflow-intel on Windows. Returns the findings and whether the
    release was found in the table."""
    findings: list[AuditFinding] = []
    known = False
    python = _python(inv)
    for start in TF_PIP:
        pkg = inv.pip(start)
        if pkg is None or not pkg.version:
            continue
        stack = [(start, pkg.version)]
        seen: set[str] = set()
        while stack:
            dist, version = stack.pop()
            release = _table_version(dist, version)
            if release is None or dist in seen:
                continue
            seen.add(dist)
            known = True
            for d in tfmeta.declared(dist, release, python, inv.platform):
                name = _canonical(d.requirement.name)
                if name in TF_PIP:
                    pins = [s.version for s in d.requirement.specifier if s.operator == "=="]
                    if pins:
                        stack.append((name, pins[0]))
                    continue
                if d.requirement.marker is not None and (
                    (python is None and "python" in str(d.requirement.marker))
                    or (inv.platform is None and "platform" in str(d.requirement.marker))
                ):
                    continue
                have = _exact(_python_package(inv, SAME_MODULE.get(name, name)))
                if have is None or d.requirement.specifier.contains(
                    Version(have), prereleases=True
                ):
                    continue
                findings.append(
                    AuditFinding(
                        "declared-requirement",
                        "problem",
                        f"{name} {have} is outside {name}{d.requirement.specifier}, which "
                        f"{dist} {release} declares (declared; source: {d.source})",
                        cause=f"the release's own wheel requires {d.requirement}; pip installed "
                        "something else later (or was told to), and code of the release that "
                        "relies on it may fail",
                        fix=f"pip install '{name}{d.requirement.specifier}'",
                        subject=name,
                        kind="declared",
                        source=d.source,
                    )
                )
    return findings, known


def _constraint_source(c: Constraint, catalog: Catalog) -> str:
    cited = []
    for sid in c.sources:
        src = catalog.sources.get(sid)
        cited.append(f"{sid}: {src.citation}" if src else sid)
    return "; ".join(cited)


def _check_companions(
    inv: Inventory, tf: str, catalog: Catalog, reported: set[str]
) -> list[AuditFinding]:
    """The catalog's declared and known-breakage bounds of this TF line (data/constraints.yaml);
    lock preferences are not findings. A bound whose ``not_channels`` names the channel of a
    conda TensorFlow build does not apply (conda-forge builds TF against its own protobuf)."""
    findings: list[AuditFinding] = []
    base = inv.conda("tensorflow-base") or inv.conda("tensorflow")
    tf_channel = base.channel if base and not inv.pip("tensorflow") else None
    for c in catalog.constraints:
        if c.kind == "preference" or not c.applies_to(tf):
            continue
        if tf_channel and (
            tf_channel in c.not_channels
            or ("conda-forge" in c.not_channels and "conda-forge" in tf_channel)
        ):
            continue
        for name in sorted(c.names()):
            pkg = inv.any(name) or inv.any(_canonical(name))
            version = _exact(pkg)
            if pkg is None or version is None or c.allows(version):
                continue
            ident = "declared-requirement" if c.kind == "declared" else "known-breakage"
            if f"{ident}:{_canonical(c.package)}" in reported:
                break
            source = _constraint_source(c, catalog)
            findings.append(
                AuditFinding(
                    ident,
                    "problem",
                    f"{pkg.name} {version} is outside {c.package}{c.spec} for TensorFlow {tf} "
                    f"({c.kind}; source: {', '.join(c.sources)})",
                    cause=c.note or f"TF {_minor(tf)} does not work with this {c.package}",
                    fix=f"install {c.package}{c.spec}; 'envfactory show COMBO' lists every bound "
                    "with its kind and source",
                    subject=_canonical(c.package),
                    kind=c.kind,
                    source=source,
                )
            )
            break
    return findings


def _check_keras(inv: Inventory, tf: str, reported: set[str]) -> list[AuditFinding]:
    """Standalone keras against the TF line, for every line: keras 2.6 and later is tf.keras
    split out of TensorFlow and moves in lockstep with it (TF 2.6-2.15 declare keras of their
    own minor, data/tf-requires.json); TF 2.16 and later need keras 3. A conda TensorFlow 2.6
    on Anaconda's channel does not pull keras in, which its tf.keras needs."""
    findings: list[AuditFinding] = []
    keras = inv.any("keras")
    version = _exact(keras)
    tfv = _v(tf)
    if keras and version and "declared-requirement:keras" not in reported:
        kv = _v(version)
        want = None
        if kv >= (2, 6) and kv < (3,) and kv[:2] != tfv[:2] and (2, 6) <= tfv[:2] < (2, 16):
            want = f"keras {_minor(tf)}.x"
        elif kv >= (2, 6) and tfv[:2] < (2, 6):
            want = "the keras that came with this TensorFlow (tf.keras) or keras < 2.4"
        elif tfv[:2] >= (2, 16) and kv < (3,):
            want = "keras 3"
        if want:
            findings.append(
                AuditFinding(
                    "keras-skew",
                    "problem",
                    f"keras {version} does not belong with TensorFlow {tf} (declared: "
                    "TensorFlow 2.6-2.15 each declare the keras of their own minor, 2.16 and "
                    "later keras>=3; data/tf-requires.json)",
                    cause="keras 2.6 and later is tf.keras split out of TensorFlow: it imports "
                    "TensorFlow internals of its own release and fails (AlreadyExistsError, "
                    "missing modules) under another",
                    fix=f"install {want}",
                    subject="keras",
                    kind="declared",
                    source=f"Requires-Dist of tensorflow {_minor(version)}.0, PyPI, retrieved "
                    f"{tfmeta.retrieved()}",
                )
            )
        elif kv < (2, 3) and tfv[:1] >= (2,):
            findings.append(
                AuditFinding(
                    "keras-skew",
                    "problem",
                    f"multi-backend keras {version} supports TensorFlow 1 only; this is "
                    f"TensorFlow {tf} (known breakage; source: keras-2-3-release)",
                    cause="keras 2.2.5 and older call TF 1 graph APIs (tf.get_default_graph, "
                    "tf.Session) that TensorFlow 2 removed: building a model fails",
                    fix="use tf.keras (from tensorflow import keras), or multi-backend keras 2.3.x",
                    subject="keras",
                    kind="breakage",
                    source="keras-2-3-release",
                )
            )
    base = inv.conda("tensorflow-base") or inv.conda("tensorflow")
    if (
        inv.complete
        and base
        and (2, 6) <= tfv[:2] < (2, 7)
        and "conda-forge" not in base.channel
        and keras is None
        and not inv.pip("tensorflow")
    ):
        findings.append(
            AuditFinding(
                "keras-missing",
                "problem",
                f"no keras next to {base.name} {base.version}: tf.keras of TF 2.6 is the "
                "separate keras package, which Anaconda's TF 2.6 build does not depend on",
                cause="'import tensorflow.keras' fails with No module named 'keras'",
                fix="install keras 2.6 (conda install keras=2.6)",
                subject="keras",
                kind="declared",
                source=f"Requires-Dist of tensorflow 2.6.0 (keras~=2.6), PyPI, retrieved "
                f"{tfmeta.retrieved()}",
            )
        )
    return findings


def _check_distributions(inv: Inventory) -> list[AuditFinding]:
    """Two TensorFlow distributions in one site-packages write the same files; tensorflow next
    to tensorflow-intel of its own version (what the Windows wheel pulls in from 2.10 on) is the
    one legitimate pair."""
    pip = [p for p in inv.packages if p.manager == "pip" and _canonical(p.name) in TF_PIP]
    pairs = []
    for i, a in enumerate(pip):
        for b in pip[i + 1 :]:
            if a.marker or b.marker:
                continue  # requirements for different platforms ('platform_system == ...')
            names = {_canonical(a.name), _canonical(b.name)}
            same = bool(a.version and b.version and _minor(a.version) == _minor(b.version))
            if names <= {"tensorflow", "tensorflow-intel", "tensorflow-cpu-aws"} and same:
                continue
            if names == {"tensorflow", "tensorflow-gpu"} and same and _v(a.version) >= (2, 1):
                continue  # one build of one release under two names
            pairs.append((a, b))
    return [
        AuditFinding(
            "two-tf-distributions",
            "problem",
            f"{a.name} {a.version or '(any)'} and {b.name} {b.version or '(any)'} are both "
            "installed",
            cause="both install the same 'tensorflow' package directory; whichever pip installed "
            "last overwrote the other's files, so which build imports (CPU or GPU, which "
            "release) is an accident of order",
            fix=f"pip uninstall {a.name} {b.name}, then install the one you want",
            subject=_canonical(b.name),
        )
        for a, b in pairs[:1]
    ]


GPU_NAME = re.compile(r"gpu|cuda", re.I)


def _gpu_intent(inv: Inventory) -> str | None:
    """Why this environment is meant to use a GPU, or None."""
    if inv.any("tensorflow-gpu"):
        return "tensorflow-gpu is requested"
    libs = [p.name for p in inv.packages if CUDA_LIBRARY.match(p.name) and p.manager == "conda"]
    libs += [p.name for p in inv.packages if re.match(r"^nvidia-(cudnn|cuda-runtime)", p.name)]
    if libs:
        return f"CUDA packages are installed ({', '.join(sorted(set(libs))[:3])})"
    if inv.name and GPU_NAME.search(inv.name):
        return f"the environment is named {inv.name!r}"
    return None


def _check_gpu_intent(inv: Inventory, tf: str) -> list[AuditFinding]:
    """GPU intent next to a TensorFlow that has no GPU build: pip tensorflow before 1.15 (the
    GPU wheel was tensorflow-gpu), tensorflow-cpu, intel-tensorflow, and TensorFlow 2.11 and
    later on native Windows (tf-tested-windows: 'GPU support on native-Windows is only available
    for 2.10 or earlier versions')."""
    intent = _gpu_intent(inv)
    if intent is None or inv.conda("tensorflow-base") or inv.conda("tensorflow"):
        return []
    why = None
    gpu = inv.pip("tensorflow-gpu")
    if inv.platform and inv.platform.startswith("win") and _v(tf)[:2] >= (2, 11):
        why = (
            f"TensorFlow {tf} has no GPU build for native Windows (GPU support there ends "
            "with 2.10; tf-tested-windows)",
            "use TensorFlow 2.10 (pip install 'tensorflow<2.11' with cudatoolkit 11.2, "
            "cudnn 8.1) or WSL2",
        )
    elif (cpu := inv.pip("tensorflow-cpu") or inv.pip("intel-tensorflow")) and not gpu:
        why = (
            f"{cpu.name} {cpu.version} is a CPU-only build",
            "install tensorflow (>=2.1) or tensorflow-gpu instead",
        )
    elif (tfp := inv.pip("tensorflow")) and not gpu and tfp.version and _v(tfp.version) < (1, 15):
        why = (
            f"pip's tensorflow {tfp.version} is CPU-only: before 1.15 the GPU wheel was "
            "tensorflow-gpu (tf-gpu-doc-2020)",
            "install tensorflow-gpu of the same release",
        )
    if why is None:
        return []
    return [
        AuditFinding(
            "tf-cpu-build-gpu-intent",
            "problem",
            f"{why[0]}, but the environment is meant for a GPU: {intent}",
            cause="TensorFlow runs on the CPU only; tf.config.list_physical_devices('GPU') is "
            "empty",
            fix=why[1],
            source="tf-tested-windows, tf-gpu-doc-2020",
        )
    ]


def _unchecked(inv: Inventory, tf: str | None, declared_known: bool) -> str | None:
    """Why TensorFlow's verdict is 'unknown: not checked', or None when the checks had what
    they need (an exact release that the tested-build tables or the Requires-Dist table know)."""
    if tf is None:
        return "no TensorFlow with a version in this file"
    pkg = _tf_package(inv)
    if pkg is None or (_exact(pkg) is None and not tf.endswith("*")):
        return f"TensorFlow's version '{tf}' is not one release"
    if not declared_known and _prerelease(tf):
        return f"TensorFlow {tf} is a pre-release that no release table holds: not checked"
    if (_minor(tf), _os(inv.platform)) not in releases():
        return (
            f"TensorFlow {tf} is not in TF's tested-build tables (1.0 onwards): CUDA, cuDNN "
            "and Python not checked"
        )
    return None


def _prerelease(tf: str) -> bool:
    try:
        return Version(tf).is_prerelease
    except InvalidVersion:
        return False


def _check_cuda(inv: Inventory, tf: str, catalog: Catalog) -> list[AuditFinding]:
    findings: list[AuditFinding] = []
    have = _cuda_in_env(inv)
    base = inv.conda("tensorflow-base") or inv.conda("tensorflow")
    wanted: tuple[str, str] | None = None  # (CUDA the build needs, why)
    if base and base.build:
        built = _cuda_of_build(base.build)
        if built:
            wanted = (built, f"{base.name} build {base.build} is made for CUDA {built}")
        else:
            for combo in catalog.combos.values():
                for route in combo.platforms.values():
                    for pin in route.conda:
                        if pin.name == base.name and pin.build == base.build:
                            wanted = (
                                combo.cuda.value,
                                f"{base.name} build {base.build} is the one of combo "
                                f"{combo.name} (CUDA {combo.cuda.value})",
                            )
    elif (
        (pip := inv.pip("tensorflow-gpu") or inv.pip("tensorflow")) and pip.version
    ) or (
        # A complete listing with a conda tensorflow-gpu and no tensorflow-base: a build that
        # carries TF's own GPU binary (community channels, e.g. aaronzs), made for the CUDA of
        # TF's tested-build table like the wheel.
        (pip := inv.conda("tensorflow-gpu")) and inv.complete and _exact(pip)
        and pip.build and not _cuda_of_build(pip.build)
    ):  # fmt: skip
        row = releases().get((_minor(pip.version), _os(inv.platform)))
        linux = releases().get((_minor(pip.version), "linux"))
        if row and "." not in row.cuda and linux and _v(linux.cuda)[:1] == _v(row.cuda)[:1]:
            # The Windows table gives CUDA "10" for 1.13-2.0; the wheels load cudart64_100.dll
            # (CUDA 10.0, as the Linux row says): compare with that, not with a bare major.
            row = linux
        if row:
            whose = "pip's" if pip.manager == "pip" else "conda's self-contained"
            wanted = (row.cuda, f"{whose} {pip.name} {pip.version} was built for CUDA {row.cuda}")
    if have and wanted:
        h, w = _v(have[0]), _v(wanted[0])
        if len(w) == 1 and w <= (10,):
            # The tables give CUDA "8" / "9" for TF 1.0-1.12: those binaries load the X.0
            # libraries (libcudart.so.9.0, cudart64_90.dll), so "9" means 9.0.
            w = (w[0], 0)
        # CUDA 10.x sonames carry the minor (libcudart.so.10.0 vs .10.1); from 11 on the major.
        ok = h[:2] == w[:2] if w[:1] == (10,) or w[:1] < (10,) else (h[:1] == w[:1] and h >= w)
        if not ok:
            findings.append(
                AuditFinding(
                    "cuda-mismatch",
                    "problem",
                    f"{have[1]} {have[0]} is not the CUDA TensorFlow needs: {wanted[1]}",
                    cause="TensorFlow loads the CUDA runtime by its versioned name; another CUDA "
                    "release is not found (or loads and fails)",
                    fix=f"install CUDA {wanted[0]} (cudatoolkit / cuda-version) or the TensorFlow "
                    "build for the CUDA you have",
                )
            )
    cudnn = inv.conda("cudnn")
    toolkit = inv.conda("cudatoolkit")
    built_for = _cuda_of_build(cudnn.build) if cudnn else None
    if cudnn and toolkit and built_for and _v(built_for)[:2] != _v(toolkit.version)[:2]:
        findings.append(
            AuditFinding(
                "cuda-mismatch",
                "problem",
                f"cudnn {cudnn.version} build {cudnn.build} is made for CUDA {built_for}, "
                f"cudatoolkit is {toolkit.version}",
                cause="a cuDNN built for another CUDA release fails to load or to initialize",
                fix=f"install the cudnn build for CUDA {_minor(toolkit.version)}",
            )
        )
    return findings


def _check_python(inv: Inventory, tf: str) -> list[AuditFinding]:
    py = _python(inv)
    if py is None:
        return []
    base = inv.conda("tensorflow-base") or inv.conda("tensorflow")
    if base and (m := re.search(r"py(\d)(\d{1,2})", base.build)):
        built = f"{m[1]}.{m[2]}"
        if built != py:
            return [
                AuditFinding(
                    "python-outside-range",
                    "problem",
                    f"{base.name} build {base.build} is for Python {built}, the environment has "
                    f"Python {py}",
                    cause="a conda build's pyXY names the only Python its compiled module imports "
                    "in",
                    fix=f"use Python {built}, or the {base.name} build for Python {py}",
                )
            ]
        return []
    row = releases().get((_minor(tf), _os(inv.platform)))
    if row and py not in row.pythons:
        return [
            AuditFinding(
                "python-outside-range",
                "problem",
                f"Python {py} is outside TensorFlow {_minor(tf)}'s range "
                f"({', '.join(row.pythons)}; {row.source})",
                cause="TensorFlow ships compiled wheels for these Pythons only; binaries built for "
                "another Python fail at import ('No module named numpy.core._multiarray_umath')",
                fix=f"create the environment with Python {row.pythons[-1]}",
            )
        ]
    return []


def _check_channels(inv: Inventory) -> list[AuditFinding]:
    channels: dict[str, list[str]] = {}
    for p in inv.packages:
        if p.manager == "conda" and CUDA_LIBRARY.match(p.name) and p.channel:
            key = "pkgs/main" if p.channel in ("pkgs/main", "defaults", "anaconda") else p.channel
            channels.setdefault(key, []).append(p.name)
    if len(channels) < 2:
        return []
    listing = "; ".join(f"{ch}: {', '.join(sorted(n))}" for ch, n in sorted(channels.items()))
    return [
        AuditFinding(
            "cuda-mixed-channels",
            "warning",
            f"CUDA libraries come from {len(channels)} channels ({listing})",
            cause="each channel builds its CUDA packages against its own cudatoolkit/cuda-version; "
            "mixing them gives libraries that expect different files and versions",
            fix="take all CUDA packages from one channel (the closest combo's lock does)",
        )
    ]


def _check_pip_over_conda(inv: Inventory) -> list[AuditFinding]:
    findings = []
    conda_tf = next(
        (c for n in ("tensorflow-base", "tensorflow", "tensorflow-gpu") if (c := inv.conda(n))),
        None,
    )
    pip_tf = next((p for n in TF_PIP if (p := inv.pip(n))), None)
    for conda, pip in ((conda_tf, pip_tf),):
        if conda and pip:
            findings.append(
                AuditFinding(
                    "pip-tf-over-conda",
                    "problem",
                    f"pip's {pip.name} {pip.version} is installed over conda's {conda.name} "
                    f"{conda.version} ({conda.build})",
                    cause="two TensorFlows in one site-packages: pip's files overwrite conda's, "
                    "conda "
                    "still believes its build is there, and the next conda update breaks both",
                    fix="recreate the environment from the combo's lock (conda and pip sides "
                    "apart)",
                )
            )
            break
    for name in SHARED_NAMES:
        conda, pip = inv.conda(name), inv.pip(name)
        if conda and pip and conda.version != pip.version:
            findings.append(
                AuditFinding(
                    "pip-over-conda",
                    "warning",
                    f"{name} is installed twice: pip's {pip.version} over conda's {conda.version}",
                    cause="pip's files overwrite conda's in one site-packages; conda's record "
                    "still "
                    "names its own version, so the next conda install or update mixes the two",
                    fix=f"pip uninstall {name}, then conda install {name} of the version you need",
                    subject=name,
                )
            )
    wheels = [p for p in inv.packages if p.manager == "pip" and p.name.startswith("nvidia-")]
    if wheels and inv.conda("cudatoolkit"):
        findings.append(
            AuditFinding(
                "pip-cuda-over-conda",
                "warning",
                f"pip's NVIDIA wheels ({', '.join(p.name for p in wheels[:4])}) next to conda's "
                "cudatoolkit",
                cause="two copies of the CUDA libraries; which one loads depends on the search "
                "order",
                fix="keep one source of CUDA libraries",
            )
        )
    return findings


# --------------------------------------------------------------------------------------------
# The closest combo and its manifest entry


def closest_combo(catalog: Catalog, inv: Inventory, tf: str) -> tuple[Combo, str] | None:
    best: tuple[tuple[int, ...], Combo, str] | None = None
    have_cuda = _cuda_in_env(inv)
    py = _python(inv)
    for combo in catalog.combos.values():
        ctf = combo.tensorflow.value
        score = [
            _v(ctf)[:2] == _v(tf)[:2],
            _v(ctf) == _v(tf),
            inv.platform in combo.platforms,
            bool(have_cuda and _v(have_cuda[0])[:2] == _v(combo.cuda.value)[:2]),
            bool(py and any(py in r.pythons for r in combo.platforms.values())),
            -abs(_v(ctf)[1] - _v(tf)[1]) if _v(ctf)[:1] == _v(tf)[:1] else -99,
        ]
        key = tuple(int(s) for s in score)
        if best is None or key > best[0]:
            why = [f"TensorFlow {ctf}"]
            why.append(f"CUDA {combo.cuda.value}")
            if inv.platform in combo.platforms:
                why.append(f"covers {inv.platform}")
            best = (key, combo, ", ".join(why))
    return (best[1], best[2]) if best else None


TOP_LEVEL_SKIP = re.compile(
    r"^(python|pip|setuptools|wheel|numpy|tensorflow.*|_tflow_select|cudatoolkit|cudnn|cupti|"
    r"cuda-.*|tensorboard.*|keras.*|h5py|protobuf|nccl)$"
)


def manifest_entry(combo: Combo, inv: Inventory, platform: str | None) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", inv.name or "env").strip("_") or "env"
    if not re.match(r"^[A-Za-z_]", name):
        name = f"env_{name}"
    lines = [
        "environments:",
        f"  {name}:",
        f"    combo: {combo.name}",
    ]
    if platform and platform in combo.platforms:
        lines.append(f"    platforms: [{platform}]")
    if inv.kind == "environment.yml":
        extra = sorted(
            {
                p.name
                for p in inv.packages
                if p.manager == "conda" and not TOP_LEVEL_SKIP.match(p.name)
            }
        )
        if extra:
            lines.append(f"    add: [{', '.join(extra)}]")
    else:
        lines.append(
            f"    # add: [...]  the packages your code imports ({len(inv.packages)} are listed, "
            "most are dependencies)"
        )
    return "\n".join(lines) + "\n"


def _check_windows_gpu(inv: Inventory, tf: str) -> list[AuditFinding]:
    """TensorFlow >= 2.11 has no native-Windows GPU build (source tf-tested-windows)."""
    if _os(inv.platform) != "windows" or _v(tf)[:2] <= (2, 10):
        return []
    return [
        AuditFinding(
            "no-windows-gpu-build",
            "problem",
            f"TensorFlow {tf} on native Windows ({inv.platform}) runs on the CPU only",
            cause="TensorFlow's Windows tested-build table: 'GPU support on native-Windows is only "
            "available for 2.10 or earlier versions'; 2.11+ Windows wheels are CPU builds",
            fix="use WSL2 with a linux-64 environment of the same TensorFlow, or TensorFlow 2.10 "
            "with CUDA 11.2 / cuDNN 8.1 natively ('envfactory recommend --platform win-64')",
        )
    ]


def audit(catalog: Catalog, inv: Inventory) -> AuditReport:
    """Every inconsistency found in one environment, the closest combo and its manifest entry."""
    tf = _tf_version(inv)
    findings: list[AuditFinding] = [
        AuditFinding(
            "line-not-judged",
            "warning",
            f"{len(inv.skipped)} line(s) could not be judged and were skipped: "
            + "; ".join(repr(x[:80]) for x in inv.skipped[:3])
            + (" ..." if len(inv.skipped) > 3 else ""),
            cause="an editable install, a URL without a version, or a line in no known form",
            fix="nothing to do if the package does not matter to TensorFlow",
        )
    ] if inv.skipped else []  # fmt: skip
    findings += _check_cpu_build(inv)
    declared_known = False
    if tf:
        declared, declared_known = _check_declared(inv)
        findings += declared
        findings += _check_family(inv, tf)
        findings += _check_companions(inv, tf, catalog, {f.key for f in findings})
        findings += _check_keras(inv, tf, {f.key for f in findings})
        findings += _check_distributions(inv)
        findings += _check_gpu_intent(inv, tf)
        findings += _check_cuda(inv, tf, catalog)
        findings += _check_python(inv, tf)
        findings += _check_windows_gpu(inv, tf)
    findings += _check_channels(inv)
    findings += _check_pip_over_conda(inv)
    findings.sort(key=lambda f: (f.scope != "tensorflow", f.severity != "problem", f.id, f.message))
    closest = closest_combo(catalog, inv, tf) if tf else None
    return AuditReport(
        inventory=inv,
        tensorflow=tf,
        findings=tuple(findings),
        closest=closest[0].name if closest else None,
        closest_why=closest[1] if closest else None,
        manifest=manifest_entry(closest[0], inv, inv.platform) if closest else None,
        unchecked=_unchecked(inv, tf, declared_known),
    )


def audit_path(catalog: Catalog, path: Path) -> list[AuditReport]:
    return [audit(catalog, inv) for inv in read_inventories(path)]
