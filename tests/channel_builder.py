"""Builds small but real conda channels for the tests: ``.tar.bz2`` packages written with the
stdlib (tarfile + json), indexed with ``rattler.index.index_fs``.

Archives are byte-reproducible: fixed tar mtimes, fixed ``timestamp`` in ``index.json``, sorted
members. Only the payloads are small; names, versions, build strings and dependencies are those of
real packages (see ``test_channels.py`` for where each record's metadata comes from).

Two kinds of channel:

* ``build_channel``: archives + ``repodata.json``; solvable and installable.
* ``write_repodata_channel``: ``repodata.json`` only, with records copied verbatim from a real
  lock (md5 and sha256 included); solvable, not installable.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import re
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import rattler.index

# conda's standard prefix placeholder: text files holding it are rewritten at install time.
PLACEHOLDER = "/opt/anaconda1anaconda2anaconda3"
# A fixed package timestamp (ms, 2019-07-01) and tar mtime make archives reproducible.
TIMESTAMP_MS = 1561939200000
TAR_MTIME = TIMESTAMP_MS // 1000


@dataclass(frozen=True)
class StubPackage:
    name: str
    version: str
    build: str
    subdir: str
    build_number: int = 0
    depends: tuple[str, ...] = ()
    constrains: tuple[str, ...] = ()
    noarch: str | None = None
    files: Mapping[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.build}.tar.bz2"

    def default_files(self) -> dict[str, str]:
        """A payload that names the package, so each archive has distinct content."""
        if self.files:
            return dict(self.files)
        key = "Library/share" if self.subdir.startswith("win") else "share"
        return {f"{key}/envf-stub/{self.name}.txt": f"{self.name} {self.version} {self.build}\n"}


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = TAR_MTIME
    info.mode = mode
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def write_package(channel: Path, pkg: StubPackage) -> Path:
    """Write one ``.tar.bz2`` into ``channel/<subdir>/`` and return its path."""
    index: dict[str, Any] = {
        "name": pkg.name,
        "version": pkg.version,
        "build": pkg.build,
        "build_number": pkg.build_number,
        "depends": list(pkg.depends),
        "constrains": list(pkg.constrains),
        "subdir": pkg.subdir,
        "license": "BSD-3-Clause",
        "timestamp": TIMESTAMP_MS,
    }
    if pkg.noarch:
        index["noarch"] = pkg.noarch
    files = pkg.default_files()
    paths: list[dict[str, Any]] = []
    has_prefix: list[str] = []
    for rel, content in sorted(files.items()):
        data = content.encode()
        entry: dict[str, Any] = {
            "_path": rel,
            "path_type": "hardlink",
            "sha256": hashlib.sha256(data).hexdigest(),
            "size_in_bytes": len(data),
        }
        if PLACEHOLDER in content:
            entry.update(prefix_placeholder=PLACEHOLDER, file_mode="text")
            has_prefix.append(f"{PLACEHOLDER} text {rel}")
        paths.append(entry)
    target = channel / pkg.subdir / pkg.filename
    target.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as tar:
        _add(tar, "info/index.json", json.dumps(index, sort_keys=True).encode())
        _add(tar, "info/paths.json", json.dumps({"paths": paths, "paths_version": 1}).encode())
        _add(tar, "info/files", "".join(f"{p}\n" for p in sorted(files)).encode())
        if has_prefix:
            _add(tar, "info/has_prefix", "".join(f"{h}\n" for h in has_prefix).encode())
        for rel, content in sorted(files.items()):
            mode = 0o755 if rel.startswith("bin/") else 0o644
            _add(tar, rel, content.encode(), mode)
    target.write_bytes(buffer.getvalue())
    return target


def index_channel(channel: Path) -> None:
    (channel / "noarch").mkdir(parents=True, exist_ok=True)
    asyncio.run(rattler.index.index_fs(channel, write_zst=False, write_shards=False, force=True))


def build_channel(channel: Path, packages: Iterable[StubPackage]) -> Path:
    """Write every package (later duplicates of a file name are dropped) and index the channel."""
    seen: set[tuple[str, str]] = set()
    for pkg in packages:
        key = (pkg.subdir, pkg.filename)
        if key in seen:
            continue
        seen.add(key)
        write_package(channel, pkg)
    index_channel(channel)
    return channel


# --------------------------------------------------------------------------------------------
# Records from real conda-lock files.


@dataclass(frozen=True)
class LockRecord:
    """One conda package of a real conda-lock.yml, as the lock states it."""

    name: str
    version: str
    build: str
    subdir: str
    filename: str
    depends: tuple[str, ...]
    md5: str
    sha256: str
    platform: str

    def stub(self) -> StubPackage:
        noarch = "generic" if self.subdir == "noarch" else None
        return StubPackage(
            name=self.name,
            version=self.version,
            build=self.build,
            subdir=self.subdir,
            depends=self.depends,
            noarch=noarch,
        )


def _split_filename(filename: str) -> tuple[str, str, str]:
    stem = filename.removesuffix(".tar.bz2").removesuffix(".conda")
    name, version, build = stem.rsplit("-", 2)
    return name, version, build


def read_lock_records(path: Path, platform: str) -> list[LockRecord]:
    """The conda records of ``platform`` in a real conda-lock v1 file.

    Build strings come from the URL's file name (v1 has no build field); ``dependencies`` maps
    name to spec exactly as conda-lock wrote it and becomes ``"name spec"``.
    """
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    out: list[LockRecord] = []
    for pkg in doc["package"]:
        if pkg["manager"] != "conda" or pkg["platform"] != platform:
            continue
        url = str(pkg["url"])
        subdir, filename = url.rsplit("/", 2)[-2:]
        name, version, build = _split_filename(filename)
        deps = tuple(
            f"{dep} {spec}".strip() for dep, spec in sorted((pkg.get("dependencies") or {}).items())
        )
        out.append(
            LockRecord(
                name=name,
                version=version,
                build=build,
                subdir=subdir,
                filename=filename,
                depends=deps,
                md5=str(pkg["hash"]["md5"]),
                sha256=str(pkg["hash"].get("sha256") or ""),
                platform=platform,
            )
        )
    return out


def write_repodata_channel(channel: Path, records: Sequence[LockRecord]) -> Path:
    """A channel of ``repodata.json`` files only, holding the real records with their real
    md5/sha256 (no archives: it can be solved against, not installed from)."""
    by_subdir: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for rec in records:
        section = "packages.conda" if rec.filename.endswith(".conda") else "packages"
        subdir = by_subdir.setdefault(rec.subdir, {"packages": {}, "packages.conda": {}})
        entry: dict[str, Any] = {
            "name": rec.name,
            "version": rec.version,
            "build": rec.build,
            "build_number": _build_number(rec.build),
            "depends": list(rec.depends),
            "md5": rec.md5,
            "subdir": rec.subdir,
            "timestamp": TIMESTAMP_MS,
        }
        if rec.sha256:
            entry["sha256"] = rec.sha256
        if rec.subdir == "noarch":
            entry["noarch"] = "generic"
        subdir[section][rec.filename] = entry
    for subdir_name in {"noarch", *by_subdir}:
        content = by_subdir.get(subdir_name, {"packages": {}, "packages.conda": {}})
        doc = {"info": {"subdir": subdir_name}, **content, "repodata_version": 1}
        target = channel / subdir_name / "repodata.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
    return channel


def _build_number(build: str) -> int:
    tail = build.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


# --------------------------------------------------------------------------------------------
# The channels the tests lock against.

DATA = Path(__file__).parent / "data"
REAL_ENVS = DATA / "real-envs"
PANGEO_LOCK = REAL_ENVS / (
    "tf2.10.0-cuda11.2-linux64-condalock--pangeo-data-pangeo-docker-images.conda-lock.yml"
)
DEEPALI_LOCK = REAL_ENVS / (
    "pytorch1.9.1-cuda11.2-linux64-osx64-win64-condalock--BioMedIA-deepali.conda-lock.yml"
)

PY37 = "python >=3.7,<3.8.0a0"


def defaults_packages() -> list[StubPackage]:
    """Anaconda ``defaults`` packages for tf114-cuda100 (both platforms) and tf114-cuda101
    (linux-64), plus the decoys a careless lock would pick.

    Names, versions and build strings are real (catalog sources; feasibility.md §1a). There is no
    repodata of these 2019 packages in our real data, so the ``depends`` below are written by
    hand: minimal and plausible (the constraints that matter for the solve, e.g. cudnn's
    cudatoolkit range and python's ABI pin; real ones also list libgcc-ng, mkl, blas...).
    No TF 1.14 package depends on ``__cuda``: Anaconda built them before conda 4.8 introduced it.
    """
    out: list[StubPackage] = []
    for subdir, py_build, py38_build, np_build, sk_build in (
        ("linux-64", "h0371630_0", "h0371630_2", "py37h7e9f1db_0", "py37h0573a6f_0"),
        ("win-64", "h8c8aaf0_1", "hff0d562_2", "py37h19fb1c0_0", "py37h47e9c7a_0"),
    ):
        linux = subdir == "linux-64"
        py_files = (
            {"bin/python3.7": "#!/bin/sh\necho stub python 3.7.3\n"}
            if linux
            else {"python.exe": "stub python 3.7.3\n"}
        )
        lib = "lib" if linux else "Library/bin"
        out += [
            StubPackage("python", "3.7.3", py_build, subdir, files=py_files),
            StubPackage("python", "3.8.0", py38_build, subdir),  # decoy: newer python
            StubPackage("pip", "19.1.1", "py37_0", subdir, depends=(PY37,)),
            StubPackage(
                "cudatoolkit",
                "10.0.130",
                "0",
                subdir,
                files={f"{lib}/libcudart.so.10.0.130": "stub cudart 10.0\n"},
            ),
            StubPackage("cudatoolkit", "10.1.243", "h6bb024c_0", subdir),  # decoy: CUDA 10.1
            StubPackage(
                "cudnn",
                "7.6.5",
                "cuda10.0_0",
                subdir,
                depends=("cudatoolkit >=10.0,<10.1",),
                files={f"{lib}/libcudnn.so.7.6.5": "stub cudnn for CUDA 10.0\n"},
            ),
            # decoy: the same cuDNN built for CUDA 10.1
            StubPackage(
                "cudnn", "7.6.5", "cuda10.1_0", subdir, depends=("cudatoolkit >=10.1,<10.2",)
            ),
            StubPackage("numpy", "1.16.4", np_build, subdir, depends=(PY37,)),
            StubPackage("numpy", "1.17.0", np_build, subdir, depends=(PY37,)),  # decoy: numpy 1.17
            StubPackage(
                "scikit-image",
                "0.16.2",
                sk_build,
                subdir,
                depends=("numpy >=1.14.6,<2.0a0", PY37),
            ),
            StubPackage("_tflow_select", "2.1.0", "gpu", subdir),
            StubPackage("_tflow_select", "2.3.0", "mkl", subdir),  # decoy: CPU selector
            StubPackage(
                "tensorflow-gpu", "1.14.0", "h0d30ee6_0", subdir, depends=("tensorflow 1.14.0",)
            ),
            # decoy: a higher build number, which a solver prefers when no build is pinned
            StubPackage(
                "tensorflow-gpu",
                "1.14.0",
                "hf154084_1",
                subdir,
                build_number=1,
                depends=("tensorflow 1.14.0",),
            ),
        ]
        if linux:
            gpu_base = (
                "cudatoolkit >=10.1.168,<10.2.0a0",
                "cudnn >=7.6.0,<8.0a0",
                "cupti",
                "numpy >=1.16.1,<2.0a0",
                "_tflow_select 2.1.0 gpu",
                PY37,
            )
            out += [
                StubPackage(
                    "cupti", "10.1.168", "0", subdir, depends=("cudatoolkit >=10.1.168,<10.2.0a0",)
                ),
                StubPackage(
                    "tensorflow-base", "1.14.0", "gpu_py37he45bfe2_0", subdir, depends=gpu_base
                ),
                # decoy: the CPU (mkl) build
                StubPackage(
                    "tensorflow-base",
                    "1.14.0",
                    "mkl_py37h7ce6ba3_0",
                    subdir,
                    depends=("numpy >=1.16.1,<2.0a0", "_tflow_select 2.3.0 mkl", PY37),
                ),
                StubPackage(
                    "tensorflow",
                    "1.14.0",
                    "gpu_py37h74c33d7_0",
                    subdir,
                    depends=(
                        "tensorflow-base 1.14.0 gpu_py37he45bfe2_0",
                        "_tflow_select 2.1.0 gpu",
                        PY37,
                    ),
                ),
                StubPackage(
                    "tensorflow",
                    "1.14.0",
                    "mkl_py37h4f0a274_0",
                    subdir,
                    depends=(
                        "tensorflow-base 1.14.0 mkl_py37h7ce6ba3_0",
                        "_tflow_select 2.3.0 mkl",
                        PY37,
                    ),
                ),
            ]
    return out


# The pangeo lock installs ncurses 6.3 next to libedit 3.1.20191231 he28a2e2_2, whose recorded
# dependency is 'ncurses >=6.2,<6.3.0a0': the one dependency of that lock its own packages do not
# satisfy (test_realdata_lock shows it). conda solved it, so the repodata it saw must have carried
# a relaxed pin (conda-forge patches repodata after the fact; conda-lock copied the unpatched
# one). This is our inference, not a record we have: the channel relaxes exactly that pin.
REPODATA_PATCHES = {
    ("libedit", "3.1.20191231", "he28a2e2_2"): {"ncurses >=6.2,<6.3.0a0": "ncurses >=6.2,<7.0a0"}
}


def patched(record: LockRecord) -> LockRecord:
    from dataclasses import replace

    patch = REPODATA_PATCHES.get((record.name, record.version, record.build))
    if not patch:
        return record
    return replace(record, depends=tuple(patch.get(d, d) for d in record.depends))


def conda_forge_records() -> list[LockRecord]:
    """Real conda-forge records: the whole pangeo TF 2.10 lock (linux-64), deepali's
    cudatoolkit 11.2.2 for linux-64 (the catalog's pin; pangeo locked 11.8, which stays in the
    channel as a decoy), and tensorflow-gpu 2.10.0 from ``conda search --info``
    (research/compat-facts.md: depends ``tensorflow 2.10.0 cuda112py310he87a039_0``)."""
    records = [patched(r) for r in read_lock_records(PANGEO_LOCK, "linux-64")]
    records += [
        r
        for r in read_lock_records(DEEPALI_LOCK, "linux-64")
        if r.name == "cudatoolkit" and r.version == "11.2.2"
    ]
    records.append(
        LockRecord(
            name="tensorflow-gpu",
            version="2.10.0",
            build="cuda112py310h0bbbad9_0",
            subdir="linux-64",
            filename="tensorflow-gpu-2.10.0-cuda112py310h0bbbad9_0.tar.bz2",
            depends=("tensorflow 2.10.0 cuda112py310he87a039_0",),
            md5="b602809e05b698ada2bbf00b25a1308d",
            sha256="",
            platform="linux-64",
        )
    )
    return records


def conda_forge_packages() -> list[StubPackage]:
    return [r.stub() for r in conda_forge_records()] + conda_forge_win_packages()


# The VC runtime records: real ones (name, version, build, depends) from deepali's lock, win-64.
# That lock took them from the anaconda channel; conda-forge's win-64 packages depend on the same
# names, and we have no conda-forge win-64 vc record, so these stand in for conda-forge's.
VC_RUNTIME = ("vc", "vs2015_runtime")
VC_DEPENDS = ("vc >=14.1,<15.0a0", "vs2015_runtime >=14.16.27012")


def conda_forge_win_packages() -> list[StubPackage]:
    """conda-forge win-64 packages for tf23-cuda101 (route conda-cuda+pip), plus decoys.

    * ``cudatoolkit 10.1.243 h3826478_8`` and ``cudnn 7.6.5.32 h36d860d_1``: real names, versions
      and build strings (GH-index 38572339605, ``gh-38572339605`` in envfactory/data/sources.yaml).
      Their ``depends`` are not in our real data: HAND-WRITTEN, minimal and plausible (cudnn's
      cudatoolkit range, the VC runtime every conda-forge win-64 binary needs).
    * ``vc 14.2 h21ff451_1`` and ``vs2015_runtime 14.27.29016 h5e58377_2``: real records, see
      ``VC_RUNTIME``.
    * ``python 3.8.6`` build ``envf_stub_0``: a STUB; no file in tests/data holds a win-64
      python 3.8 record, so version and build are invented (the build says so).
    * pip, setuptools and wheel come from the pangeo lock's real noarch records.
    * Decoys (invented records, labelled): a cudatoolkit 10.1.243 build with a higher build
      number, a cudnn 7.6.5.32 build for CUDA 10.2 next to a cudatoolkit 10.2.89, and a newer
      python 3.9 stub; a lock that ignored the catalog's exact pins would pick them.
    """
    subdir = "win-64"
    vc = [
        r.stub()
        for r in read_lock_records(DEEPALI_LOCK, subdir)
        if r.name in VC_RUNTIME and r.subdir == subdir
    ]
    assert {p.name for p in vc} == set(VC_RUNTIME), vc
    cudart = {"Library/bin/cudart64_101.dll": "stub cudart 10.1\n"}
    return [
        *vc,
        StubPackage("python", "3.8.6", "envf_stub_0", subdir, depends=VC_DEPENDS,
                    files={"python.exe": "stub python 3.8.6\n"}),
        # decoy (invented): a newer python
        StubPackage("python", "3.9.12", "envf_stub_0", subdir, depends=VC_DEPENDS),
        StubPackage("cudatoolkit", "10.1.243", "h3826478_8", subdir, build_number=8,
                    depends=VC_DEPENDS, files=cudart),
        # decoy (invented build string): the same version with a higher build number
        StubPackage("cudatoolkit", "10.1.243", "h3826478_9", subdir, build_number=9,
                    depends=VC_DEPENDS),
        # decoy (invented build string): CUDA 10.2
        StubPackage("cudatoolkit", "10.2.89", "envf_decoy_0", subdir, depends=VC_DEPENDS),
        StubPackage("cudnn", "7.6.5.32", "h36d860d_1", subdir, build_number=1,
                    depends=("cudatoolkit >=10.1,<10.2", *VC_DEPENDS),
                    files={"Library/bin/cudnn64_7.dll": "stub cudnn 7.6.5 for CUDA 10.1\n"}),
        # decoy (invented build string): the same cuDNN built for CUDA 10.2, higher build number
        StubPackage("cudnn", "7.6.5.32", "envf_cuda102_2", subdir, build_number=2,
                    depends=("cudatoolkit >=10.2,<10.3", *VC_DEPENDS)),
    ]  # fmt: skip


# --------------------------------------------------------------------------------------------
# A folder of small wheels with real names, versions, file names and requirements.

ZIP_TIME = (2019, 7, 1, 0, 0, 0)
# The console scripts of the real wheels, as their entry_points.txt lists them (read from the
# files on PyPI with HTTP range requests, 2026-12-03): tensorflow_gpu-1.14.0-cp37-cp37m-
# manylinux1_x86_64.whl and tensorboard-1.14.0-py3-none-any.whl. Both declare ``tensorboard``
# (TF's setup.py keeps it so pip does not remove the command: tensorflow/tensorflow
# tensorflow/tools/pip_package/setup.py, CONSOLE_SCRIPTS).
ENTRY_POINTS = {
    ("tensorflow-gpu", "1.14.0"): (
        "freeze_graph = tensorflow.python.tools.freeze_graph:run_main",
        "saved_model_cli = tensorflow.python.tools.saved_model_cli:main",
        "tensorboard = tensorboard.main:run_main",
        "tf_upgrade_v2 = tensorflow.tools.compatibility.tf_upgrade_v2_main:main",
        "tflite_convert = tensorflow.lite.python.tflite_convert:main",
        "toco = tensorflow.lite.python.tflite_convert:main",
        "toco_from_protos = tensorflow.lite.toco.python.toco_from_protos:main",
    ),
    ("tensorboard", "1.14.0"): ("tensorboard = tensorboard.main:run_main",),
}


def write_wheel(
    folder: Path,
    name: str,
    version: str,
    filename: str,
    requires_dist: Sequence[str],
    requires_python: str | None,
) -> Path:
    import base64
    import zipfile

    dist = filename.split("-", 1)[0]
    module = re.sub(r"[^A-Za-z0-9_]", "_", name.lower())
    info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        metadata.append(f"Requires-Python: {requires_python}")
    metadata += [f"Requires-Dist: {r}" for r in requires_dist]
    tag = filename.removesuffix(".whl").split("-", 2)[2]
    files = {
        f"{module}/__init__.py": f'__version__ = "{version}"\n',
        f"{info}/METADATA": "\n".join(metadata) + "\n",
        f"{info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: envfactory-tests\nRoot-Is-Purelib: true\nTag: {tag}\n"
        ),
    }
    scripts = ENTRY_POINTS.get((name.lower().replace("_", "-"), version))
    if scripts:
        files[f"{info}/entry_points.txt"] = "[console_scripts]\n" + "".join(
            f"{line}\n" for line in scripts
        )
    record = []
    for path, text in files.items():
        digest = (
            base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        )
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    target = folder / filename
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, text in files.items():
            zf.writestr(zipfile.ZipInfo(path, ZIP_TIME), text)
    return target


def build_wheel_folder(folder: Path, reports: Iterable[Path]) -> Path:
    """Wheels for the packages of the captured reports (``data/pypi/*.json``): each with the
    real name, version, file name, Requires-Dist and Requires-Python, and a small payload.

    Every report's wheels go in, side by side (tf114's typing-extensions 4.7.1 for Python 3.7
    beside tf23's 4.13.2 for 3.8): uv reads each local wheel's Requires-Python and skips what
    the target Python cannot install, as it does on an index. (pip 23.2 did not, for a
    find-links folder; this builder once left such wheels out for it.)
    """
    from packaging.utils import canonicalize_name

    folder.mkdir(parents=True, exist_ok=True)
    for report in reports:
        doc = json.loads(report.read_text(encoding="utf-8"))
        for w in doc["wheels"]:
            filename = w["filename"]
            if not filename.endswith(".whl"):
                # an sdist-only release (gast 0.2.2): the offline folder holds a pure-Python
                # wheel of the same name, version and metadata in its place
                stem = canonicalize_name(w["name"]).replace("-", "_")
                filename = f"{stem}-{w['version']}-py3-none-any.whl"
            if not (folder / filename).exists():
                write_wheel(
                    folder,
                    w["name"],
                    w["version"],
                    filename,
                    w["requires_dist"],
                    w["requires_python"],
                )
    return folder


# --------------------------------------------------------------------------------------------
# What the example project (examples/tf1-tf2/) adds to tf114-cuda100: opencv 3.4.2 and pandas.


def defaults_project_packages() -> list[StubPackage]:
    """Anaconda ``defaults`` packages the example's TF1 environment adds: opencv 3.4.2 and
    pandas with their Python dependencies, for both platforms.

    Names, versions and build strings are real, seen in published ``conda list`` / env-export
    output: linux-64 ``opencv 3.4.2 py37h6fd60c2_1``, ``py-opencv 3.4.2 py37hb342d67_1``,
    ``libopencv 3.4.2 hb342d67_1``, ``pandas 0.24.2 py37he6710b0_0``; win-64 ``opencv 3.4.2
    py37h40b0b35_0``, ``py-opencv 3.4.2 py37hc319ecb_0``, ``libopencv 3.4.2 h20b85fd_0``; and from
    tests/data/real-envs (bengeof, win-64) ``pandas 0.24.2 py37ha925a31_0``, ``python-dateutil
    2.8.0 py37_0``, ``pytz 2019.1 py_0``. ``six 1.12.0 py37_0`` is the six of that era's
    defaults. The ``depends`` are written by hand, minimal and plausible: the ABI and numpy
    constraints that matter for the solve (real ones also list ffmpeg, hdf5, jpeg, libpng,
    libtiff ... for libopencv). The decoy is a newer pandas that needs numpy >= 1.17: a solve
    that let an addition override the combo's numpy 1.16.4 would pick it.
    """
    out: list[StubPackage] = [
        StubPackage(
            "pytz", "2019.1", "py_0", "noarch", depends=("python",), noarch="python",
            files={"site-packages/pytz/__init__.py": "VERSION = '2019.1'\n"},
        ),
    ]  # fmt: skip
    for subdir, opencv, py_opencv, libopencv, pandas in (
        ("linux-64", "py37h6fd60c2_1", "py37hb342d67_1", "hb342d67_1", "py37he6710b0_0"),
        ("win-64", "py37h40b0b35_0", "py37hc319ecb_0", "h20b85fd_0", "py37ha925a31_0"),
    ):
        out += [
            StubPackage("libopencv", "3.4.2", libopencv, subdir),
            StubPackage(
                "py-opencv",
                "3.4.2",
                py_opencv,
                subdir,
                depends=(f"libopencv 3.4.2 {libopencv}", "numpy >=1.14.6,<2.0a0", PY37),
            ),
            StubPackage(
                "opencv",
                "3.4.2",
                opencv,
                subdir,
                depends=(f"libopencv 3.4.2 {libopencv}", f"py-opencv 3.4.2 {py_opencv}"),
            ),
            StubPackage("six", "1.12.0", "py37_0", subdir, depends=(PY37,)),
            StubPackage("python-dateutil", "2.8.0", "py37_0", subdir, depends=(PY37, "six >=1.5")),
            StubPackage(
                "pandas",
                "0.24.2",
                pandas,
                subdir,
                depends=(
                    "numpy >=1.15.4,<2.0a0",
                    PY37,
                    "python-dateutil >=2.5.0",
                    "pytz",
                ),
            ),
            # decoy (an invented record: version 1.0.5 with the 0.24.2 build string): newer,
            # and needs a numpy the combo does not allow
            StubPackage(
                "pandas",
                "1.0.5",
                pandas,
                subdir,
                depends=("numpy >=1.17.0,<2.0a0", PY37, "python-dateutil >=2.6.1", "pytz"),
            ),
        ]
    return out


def add_project_wheels(folder: Path) -> Path:
    """The example's TF1 environment brings six 1.12.0 from conda (python-dateutil needs it), and
    the pip side of the lock is constrained to the conda versions; PyPI has that six wheel (real
    file name; no requirements), the captured reports (pip picked six 1.17.0) do not."""
    write_wheel(folder, "six", "1.12.0", "six-1.12.0-py2.py3-none-any.whl", [], None)
    return folder


# --------------------------------------------------------------------------------------------
# examples/offline/channel: the README's offline quick start (scripts/build-example-channel).

EXAMPLE_COMBO = "tf210-cuda112"
EXAMPLE_PLATFORM: Final = "linux-64"


def example_channel_packages(conda_forge: Path, scratch: Path) -> list[StubPackage]:
    """The stubs of exactly what ``envfactory lock tf210-cuda112 --platform linux-64`` takes
    from ``conda_forge`` (the test channel of ``conda_forge_packages``): real conda-forge
    records (``conda_forge_records``: names, versions, builds, depends), tiny payloads."""
    from envfactory.catalog.loader import load_catalog
    from envfactory.solve.channels import load_channel_map
    from envfactory.solve.lock import LockRequest, lock_combo

    request = LockRequest.for_combo(
        load_catalog().combo(EXAMPLE_COMBO),
        platforms=[EXAMPLE_PLATFORM],
        channel_map=load_channel_map([f"conda-forge={conda_forge}"], environ={}),
    )
    result = lock_combo(request, scratch / EXAMPLE_COMBO)
    locked = {(p.name, p.version, p.build) for p in result.packages[EXAMPLE_PLATFORM]}
    records = [r for r in conda_forge_records() if (r.name, r.version, r.build) in locked]
    assert len(records) == len(locked), "a locked package is not a conda-forge record"
    return [r.stub() for r in records]


def build_example_channel(target: Path, conda_forge: Path, scratch: Path) -> Path:
    return build_channel(target, example_channel_packages(conda_forge, scratch))


# --------------------------------------------------------------------------------------------
# Every combo of the catalog: the channels and wheel folders tests/test_mirror_combos.py locks
# each combo and platform against.

# A real CPython release of each minor version the catalog names (python.org release list);
# the build strings of these stubs are invented (``envf_stub_0``), no file in tests/data holds
# a conda record of each.
CATALOG_PYTHONS = {
    "3.6": "3.6.13", "3.7": "3.7.16", "3.8": "3.8.18", "3.9": "3.9.18",
    "3.10": "3.10.13", "3.11": "3.11.7", "3.12": "3.12.1",
}  # fmt: skip
STUB_BUILD = "envf_stub_0"
PIP_REPORTS = DATA / "pypi" / "catalog"


def catalog_packages() -> dict[str, list[StubPackage]]:
    """Channel name -> the packages every combo of the catalog pins there, on each platform it
    covers, with the combo's default Python and, where the route has a pip side, ``pip``.

    Names, versions and build strings of the pinned packages are the catalog's own (each names
    its sources in envfactory/data/combos.yaml). A pin without a build string gets
    ``envf_stub_0``, a build pattern (``gpu_*``) has its ``*`` replaced by it. ``depends`` are
    left empty except for pip's python: the catalog records no dependencies, and these channels
    exist to lock and mirror each combo, not to test the solver (the hand-made channels above
    carry the decoys). Python and pip: real versions, invented builds (see CATALOG_PYTHONS)."""
    from envfactory.catalog.loader import load_catalog
    from envfactory.render.environment import environment_spec

    out: dict[str, dict[tuple[str, str, str, str], StubPackage]] = {}
    for combo in load_catalog().combos.values():
        for platform in combo.platforms:
            spec = environment_spec(combo, platform)
            home = spec.channels[0]
            windows = platform.startswith("win")
            py = CATALOG_PYTHONS[spec.python]
            short = spec.python.replace(".", "")
            exe = (
                {"python.exe": f"stub python {py}\n"}
                if windows
                else {f"bin/python{spec.python}": f"#!/bin/sh\necho stub python {py}\n"}
            )
            packages = [StubPackage("python", py, STUB_BUILD, platform, files=exe)]
            if spec.pip:
                upper = f"{spec.python.split('.')[0]}.{int(spec.python.split('.')[1]) + 1}"
                packages.append(
                    StubPackage(
                        "pip",
                        "23.3.1",
                        f"py{short}_{STUB_BUILD}",
                        platform,
                        depends=(f"python >={spec.python},<{upper}.0a0",),
                    )
                )
            channel_of = {p.name: home for p in packages}
            for pin in spec.conda:
                build = (pin.build or STUB_BUILD).replace("*", STUB_BUILD)
                packages.append(StubPackage(pin.name, pin.version, build, platform))
                channel_of[pin.name] = pin.channel or home
            for pkg in packages:
                out.setdefault(channel_of[pkg.name], {})[
                    (pkg.subdir, pkg.name, pkg.version, pkg.build)
                ] = pkg
    return {name: list(found.values()) for name, found in out.items()}  # fmt: skip
