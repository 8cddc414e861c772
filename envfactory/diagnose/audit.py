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

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envfactory.catalog.model import Catalog, Combo, Platform
from envfactory.diagnose.probes import read_prefix_packages
from envfactory.errors import UserInputError
from envfactory.yamlio import load_yaml

Manager = Literal["conda", "pip"]
Severity = Literal["problem", "warning"]
Kind = Literal[
    "environment.yml", "conda env export", "explicit", "conda list", "conda list --export",
    "conda-lock", "pip freeze", "prefix",
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


@dataclass(frozen=True)
class Inventory:
    source: str
    kind: Kind
    platform: Platform | str | None
    packages: tuple[Package, ...]
    name: str | None = None

    def conda(self, name: str) -> Package | None:
        return next((p for p in self.packages if p.manager == "conda" and p.name == name), None)

    def pip(self, name: str) -> Package | None:
        return next((p for p in self.packages if p.manager == "pip" and p.name == name), None)

    def any(self, name: str) -> Package | None:
        return self.conda(name) or self.pip(name)


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    message: str
    cause: str
    fix: str

    def to_json(self) -> dict[str, str]:
        return {
            "id": self.id,
            "severity": self.severity,
            "message": self.message,
            "cause": self.cause,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class AuditReport:
    inventory: Inventory
    tensorflow: str | None
    findings: tuple[Finding, ...]
    closest: str | None
    closest_why: str | None
    manifest: str | None

    @property
    def problems(self) -> int:
        return sum(1 for f in self.findings if f.severity == "problem")

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
    platform = None
    header = re.search(r"^# platform: (\S+)", text, re.M)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line == "@EXPLICIT":
            continue
        url = line.split("#", 1)[0]
        parsed = _from_filename(PurePosixPath(urlparse(url).path).name)
        if parsed is None:
            continue
        platform = platform or _platform_of_url(url)
        packages.append(Package(parsed[0], parsed[1], parsed[2], _channel_of(url), "conda"))
    return [Inventory(source, "explicit", header[1] if header else platform, tuple(packages))]


def _spec(text: str) -> tuple[str, str, str, str]:
    """A dependency string of an environment file -> (channel, name, exact version, build)."""
    channel = ""
    if "::" in text:
        channel, text = text.split("::", 1)
    text = text.strip()
    m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", text)
    if m is None:
        return channel, text, "", ""
    name, rest = m[1], m[2].replace(" ", "")
    parts = rest.lstrip("=").split("=") if rest.startswith("=") else []
    if rest.startswith("==") or (rest.startswith("=") and not rest.startswith("==")):
        version = parts[0] if parts and "*" not in parts[0] else ""
        build = parts[1] if len(parts) > 1 else ""
        return channel, name, version, build
    return channel, name, "", ""


def _pip_line(text: str) -> Package | None:
    text = text.split("#", 1)[0].strip()
    if not text or text.startswith("-"):
        return None
    m = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(?:===?\s*([^\s;,]+))?", text)
    if m is None:
        return None
    return Package(_canonical(m[1]), m[2] or "", "", "pypi", "pip")


def _env_file(doc: Mapping[str, Any], source: str) -> list[Inventory]:
    deps = doc.get("dependencies") or []
    if not isinstance(deps, list):
        raise UserInputError(f"{source}: 'dependencies' must be a list")
    packages: list[Package] = []
    builds = 0
    for dep in deps:
        if isinstance(dep, Mapping) and isinstance(dep.get("pip"), list):
            packages.extend(p for p in (_pip_line(str(x)) for x in dep["pip"]) if p)
        elif isinstance(dep, str):
            channel, name, version, build = _spec(dep)
            builds += bool(build)
            packages.append(Package(name, version, build, channel, "conda"))
    names = {p.name for p in packages if p.manager == "conda"}
    prefix = str(doc.get("prefix") or "")
    platform: str | None = None
    if {"vc", "vs2015_runtime", "ucrt"} & names or re.match(r"^[A-Za-z]:\\", prefix):
        platform = "win-64"
    elif {"_libgcc_mutex", "libgcc-ng", "ld_impl_linux-64", "libgcc"} & names:
        platform = "linux-64"
    kind: Kind = "conda env export" if builds else "environment.yml"
    env_name = str(doc["name"]) if doc.get("name") else None
    return [Inventory(source, kind, platform, tuple(packages), env_name)]


def _conda_lock(path: Path) -> list[Inventory]:
    """A conda-lock.yml, read with conda-lock's own reader (build/condalock_adapter)."""
    from envfactory.build.condalock_adapter import read_lock

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
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            raise UserInputError(
                f"{path} is not UTF-8 or UTF-16 text", "export the environment again as UTF-8"
            ) from None
    source = str(path)
    if re.search(r"^@EXPLICIT\s*$", text, re.M):
        return _explicit(text, source)
    if re.search(r"^# packages in environment at ", text, re.M):
        return _conda_list(text, source)
    stripped = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if stripped and all(re.match(r"^[A-Za-z0-9_.\-]+=[^=\s]+=\S+$", ln.strip()) for ln in stripped):
        return _conda_export(text, source)
    if stripped and all(re.match(r"^[A-Za-z0-9_.\-\[\]]+\s*(==|===| @ )", ln) for ln in stripped):
        return [
            Inventory(source, "pip freeze", None, tuple(p for p in map(_pip_line, stripped) if p))
        ]
    if re.search(r"^package:", text, re.M) and re.search(r"^metadata:", text, re.M):
        return _conda_lock(path)
    if re.search(r"^(dependencies|name|channels):", text, re.M):
        doc = load_yaml(source, text, "give an environment.yml, conda env export or conda-lock.yml")
        if isinstance(doc, Mapping) and "dependencies" in doc:
            return _env_file(doc, source)
    if stripped and all(len(ln.split()) >= 3 for ln in stripped):
        return _conda_list(text, source)
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


TF_NAMES = ("tensorflow", "tensorflow-base", "tensorflow-gpu", "tensorflow-cpu")
CUDA_LIBRARY = re.compile(
    r"^(cudatoolkit|cudnn|cupti|cuda-(cudart|nvrtc|nvcc|cupti|version|libraries|runtime)"
    r"|libcu(blas|fft|rand|solver|sparse)|libnvjitlink)$"
)
GPU_EVIDENCE = ("cudatoolkit", "cudnn", "cuda-cudart", "cuda-version", "tensorflow-gpu")


def _tf_version(inv: Inventory) -> str | None:
    for name in TF_NAMES:
        pkg = inv.any(name)
        if pkg and pkg.version:
            return pkg.version
    return None


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


def _check_cpu_build(inv: Inventory) -> list[Finding]:
    gpu_libs = [n for n in GPU_EVIDENCE if inv.conda(n)]
    findings: list[Finding] = []
    cuda_libs = [p for p in inv.packages if p.manager == "conda" and CUDA_LIBRARY.match(p.name)]
    for name in ("tensorflow-base", "tensorflow"):
        pkg = inv.conda(name)
        if pkg is None or not pkg.build or _is_gpu_build(pkg.build) or not gpu_libs:
            continue
        if not re.match(r"^(mkl|eigen|cpu|py\d|h[0-9a-f]{7})", pkg.build) and pkg.build != "0":
            continue
        findings.append(
            Finding(
                "tf-cpu-build-with-cuda",
                "problem",
                f"{name} {pkg.version} build {pkg.build} ({pkg.channel or 'unknown channel'}) is "
                f"a CPU build, next to {', '.join(gpu_libs)}",
                "TensorFlow uses the GPU only in a gpu_*/cuda* build; the CUDA packages beside "
                "this one are dead weight (a GPU metapackage over a CPU tensorflow-base, or a "
                "re-solve that swapped the build)",
                "rebuild from the closest combo's lock, which pins the GPU build string",
            )
        )
        break
    pip_tf = inv.pip("tensorflow-cpu") or (
        inv.pip("tensorflow") if (tf := inv.pip("tensorflow")) and _v(tf.version) < (2, 1) else None
    )
    if pip_tf and gpu_libs and not any(f.id == "tf-cpu-build-with-cuda" for f in findings):
        findings.append(
            Finding(
                "tf-cpu-build-with-cuda",
                "problem",
                f"pip's {pip_tf.name} {pip_tf.version} is CPU-only, next to {', '.join(gpu_libs)}",
                "before TF 2.1 the GPU wheel is tensorflow-gpu; tensorflow-cpu never uses a GPU",
                "install the GPU wheel the combo names, or rebuild from the combo's lock",
            )
        )
    torch = inv.conda("pytorch")
    mutex = inv.conda("pytorch-mutex")
    cpu_torch = (torch and re.search(r"cpu", torch.build)) or (mutex and mutex.build == "cpu")
    if cpu_torch and (inv.conda("cudatoolkit") or any(p.name == "cuda-cudart" for p in cuda_libs)):
        what = f"pytorch {torch.version} build {torch.build}" if torch else "pytorch-mutex cpu"
        findings.append(
            Finding(
                "pytorch-cpu-build-with-cuda",
                "problem",
                f"{what} is a CPU build, next to conda's CUDA libraries",
                "the solver picked PyTorch's CPU variant (no cuda* build matched the other pins), "
                "so PyTorch in this environment never uses the GPU",
                "pin the CUDA build (pytorch-cuda / a cuda* build string) or drop cudatoolkit",
            )
        )
    return findings


def _check_family(inv: Inventory, tf: str) -> list[Finding]:
    """tensorflow / -base / -gpu of one release; tensorboard, tensorflow-estimator and keras
    inside what that release's wheel requires (data/tf-releases.yaml, from PyPI's Requires-Dist);
    keras 3 from TF 2.16 on."""
    findings: list[Finding] = []
    for name in ("tensorflow-base", "tensorflow-gpu", "tensorflow"):
        pkg = inv.any(name)
        if pkg and pkg.version and _minor(pkg.version) != _minor(tf):
            findings.append(_skew(name, pkg.version, tf, f"{name} is part of TensorFlow itself"))
    row = requires().get(_minor(tf))
    for name, spec in sorted(row.specs.items()) if row else ():
        pkg = inv.any(name)
        if pkg is None or not pkg.version:
            continue
        try:
            ok = SpecifierSet(spec).contains(Version(pkg.version), prereleases=True)
        except (InvalidSpecifier, InvalidVersion):
            continue
        if not ok:
            assert row is not None
            findings.append(
                _skew(name, pkg.version, tf, f"{row.wheel} requires {name}{spec}", f"{name}{spec}")
            )
    keras = inv.any("keras")
    if keras and keras.version and _v(tf) >= (2, 16) and _v(keras.version) < (3,):
        findings.append(_skew("keras", keras.version, tf, "TF 2.16 and later require keras 3"))
    return findings


def _skew(name: str, version: str, tf: str, why: str, want: str | None = None) -> Finding:
    return Finding(
        "tf-family-skew",
        "problem",
        f"{name} {version} does not match TensorFlow {tf}",
        f"{why} (the release's Requires-Dist on PyPI); a mismatched one fails at import or at "
        "the first estimator/Keras call",
        f"install {want or f'{name} {_minor(tf)}.x'}, or rebuild from the closest combo's lock",
    )


def _check_companions(inv: Inventory, tf: str, catalog: Catalog) -> list[Finding]:
    """The catalog's companion constraints of this TF line (data/constraints.yaml); a
    constraint whose ``not_channels`` names the channel of a conda TensorFlow build does not
    apply (conda-forge builds TF against its own protobuf and pins it in the record)."""
    findings: list[Finding] = []
    base = inv.conda("tensorflow-base") or inv.conda("tensorflow")
    tf_channel = base.channel if base and not inv.pip("tensorflow") else None
    for c in catalog.constraints:
        if not c.applies_to(tf) or (tf_channel and tf_channel in c.not_channels):
            continue
        for name in sorted(c.names()):
            pkg = inv.any(name) or inv.any(_canonical(name))
            if pkg is None or not pkg.version or c.allows(pkg.version):
                continue
            findings.append(
                Finding(
                    "companion-outside-constraint",
                    "problem" if c.confirmed else "warning",
                    f"{pkg.name} {pkg.version} is outside the companion constraint "
                    f"{c.package}{c.spec} of TensorFlow {tf}"
                    + ("" if c.confirmed else " (an unconfirmed bound)"),
                    c.note or f"TF {_minor(tf)} does not work with this {c.package}",
                    f"install {c.package}{c.spec}; 'envfactory show COMBO' lists every constraint",
                )
            )
            break
    return findings


def _check_cuda(inv: Inventory, tf: str, catalog: Catalog) -> list[Finding]:
    findings: list[Finding] = []
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
    elif (pip := inv.pip("tensorflow-gpu") or inv.pip("tensorflow")) and pip.version:
        row = releases().get((_minor(pip.version), _os(inv.platform)))
        linux = releases().get((_minor(pip.version), "linux"))
        if row and "." not in row.cuda and linux and _v(linux.cuda)[:1] == _v(row.cuda)[:1]:
            # The Windows table gives CUDA "10" for 1.13-2.0; the wheels load cudart64_100.dll
            # (CUDA 10.0, as the Linux row says): compare with that, not with a bare major.
            row = linux
        if row:
            wanted = (row.cuda, f"pip's {pip.name} {pip.version} was built for CUDA {row.cuda}")
    if have and wanted:
        h, w = _v(have[0]), _v(wanted[0])
        # CUDA 10.x sonames carry the minor (libcudart.so.10.0 vs .10.1); from 11 on the major.
        ok = h[:2] == w[:2] if w[:1] == (10,) or w[:1] < (10,) else (h[:1] == w[:1] and h >= w)
        if not ok:
            findings.append(
                Finding(
                    "cuda-mismatch",
                    "problem",
                    f"{have[1]} {have[0]} is not the CUDA TensorFlow needs: {wanted[1]}",
                    "TensorFlow loads the CUDA runtime by its versioned name; another CUDA "
                    "release is not found (or loads and fails)",
                    f"install CUDA {wanted[0]} (cudatoolkit / cuda-version) or the TensorFlow "
                    "build for the CUDA you have",
                )
            )
    cudnn = inv.conda("cudnn")
    toolkit = inv.conda("cudatoolkit")
    built_for = _cuda_of_build(cudnn.build) if cudnn else None
    if cudnn and toolkit and built_for and _v(built_for)[:2] != _v(toolkit.version)[:2]:
        findings.append(
            Finding(
                "cuda-mismatch",
                "problem",
                f"cudnn {cudnn.version} build {cudnn.build} is made for CUDA {built_for}, "
                f"cudatoolkit is {toolkit.version}",
                "a cuDNN built for another CUDA release fails to load or to initialize",
                f"install the cudnn build for CUDA {_minor(toolkit.version)}",
            )
        )
    return findings


def _check_python(inv: Inventory, tf: str) -> list[Finding]:
    py = _python(inv)
    if py is None:
        return []
    base = inv.conda("tensorflow-base") or inv.conda("tensorflow")
    if base and (m := re.search(r"py(\d)(\d{1,2})", base.build)):
        built = f"{m[1]}.{m[2]}"
        if built != py:
            return [
                Finding(
                    "python-outside-range",
                    "problem",
                    f"{base.name} build {base.build} is for Python {built}, the environment has "
                    f"Python {py}",
                    "a conda build's pyXY names the only Python its compiled module imports in",
                    f"use Python {built}, or the {base.name} build for Python {py}",
                )
            ]
        return []
    row = releases().get((_minor(tf), _os(inv.platform)))
    if row and py not in row.pythons:
        return [
            Finding(
                "python-outside-range",
                "problem",
                f"Python {py} is outside TensorFlow {_minor(tf)}'s range "
                f"({', '.join(row.pythons)}; {row.source})",
                "TensorFlow ships compiled wheels for these Pythons only; binaries built for "
                "another Python fail at import ('No module named numpy.core._multiarray_umath')",
                f"create the environment with Python {row.pythons[-1]}",
            )
        ]
    return []


def _check_channels(inv: Inventory) -> list[Finding]:
    channels: dict[str, list[str]] = {}
    for p in inv.packages:
        if p.manager == "conda" and CUDA_LIBRARY.match(p.name) and p.channel:
            key = "pkgs/main" if p.channel in ("pkgs/main", "defaults", "anaconda") else p.channel
            channels.setdefault(key, []).append(p.name)
    if len(channels) < 2:
        return []
    listing = "; ".join(f"{ch}: {', '.join(sorted(n))}" for ch, n in sorted(channels.items()))
    return [
        Finding(
            "cuda-mixed-channels",
            "warning",
            f"CUDA libraries come from {len(channels)} channels ({listing})",
            "each channel builds its CUDA packages against its own cudatoolkit/cuda-version; "
            "mixing them gives libraries that expect different files and versions",
            "take all CUDA packages from one channel (the closest combo's lock does)",
        )
    ]


def _check_pip_over_conda(inv: Inventory) -> list[Finding]:
    findings = []
    for name in ("tensorflow", "tensorflow-gpu", "tensorflow-base"):
        conda, pip = inv.conda(name), inv.pip(name) or inv.pip(name.replace("-base", ""))
        if conda and pip:
            findings.append(
                Finding(
                    "pip-tf-over-conda",
                    "problem",
                    f"pip's {pip.name} {pip.version} is installed over conda's {conda.name} "
                    f"{conda.version} ({conda.build})",
                    "two TensorFlows in one site-packages: pip's files overwrite conda's, conda "
                    "still believes its build is there, and the next conda update breaks both",
                    "recreate the environment from the combo's lock (conda and pip sides apart)",
                )
            )
            break
    wheels = [p for p in inv.packages if p.manager == "pip" and p.name.startswith("nvidia-")]
    if wheels and inv.conda("cudatoolkit"):
        findings.append(
            Finding(
                "pip-cuda-over-conda",
                "warning",
                f"pip's NVIDIA wheels ({', '.join(p.name for p in wheels[:4])}) next to conda's "
                "cudatoolkit",
                "two copies of the CUDA libraries; which one loads depends on the search order",
                "keep one source of CUDA libraries",
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


def _check_windows_gpu(inv: Inventory, tf: str) -> list[Finding]:
    """TensorFlow >= 2.11 has no native-Windows GPU build (source tf-tested-windows)."""
    if _os(inv.platform) != "windows" or _v(tf)[:2] <= (2, 10):
        return []
    return [
        Finding(
            "no-windows-gpu-build",
            "problem",
            f"TensorFlow {tf} on native Windows ({inv.platform}) runs on the CPU only",
            "TensorFlow's Windows tested-build table: 'GPU support on native-Windows is only "
            "available for 2.10 or earlier versions'; 2.11+ Windows wheels are CPU builds",
            "use WSL2 with a linux-64 environment of the same TensorFlow, or TensorFlow 2.10 "
            "with CUDA 11.2 / cuDNN 8.1 natively ('envfactory recommend --platform win-64')",
        )
    ]


def audit(catalog: Catalog, inv: Inventory) -> AuditReport:
    """Every inconsistency found in one environment, the closest combo and its manifest entry."""
    tf = _tf_version(inv)
    findings: list[Finding] = []
    findings += _check_cpu_build(inv)
    if tf:
        findings += _check_family(inv, tf)
        findings += _check_companions(inv, tf, catalog)
        findings += _check_cuda(inv, tf, catalog)
        findings += _check_python(inv, tf)
        findings += _check_windows_gpu(inv, tf)
    findings += _check_channels(inv)
    findings += _check_pip_over_conda(inv)
    findings.sort(key=lambda f: (f.severity != "problem", f.id, f.message))
    closest = closest_combo(catalog, inv, tf) if tf else None
    return AuditReport(
        inventory=inv,
        tensorflow=tf,
        findings=tuple(findings),
        closest=closest[0].name if closest else None,
        closest_why=closest[1] if closest else None,
        manifest=manifest_entry(closest[0], inv, inv.platform) if closest else None,
    )


def audit_path(catalog: Catalog, path: Path) -> list[AuditReport]:
    return [audit(catalog, inv) for inv in read_inventories(path)]
