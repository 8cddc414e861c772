"""Adapter for the machine's library search paths and for an environment's own Python.

The search-order logic is pure: it works on a list of directories, a filesystem view and (on
Linux) the ld.so cache, so a Windows PATH can be checked on Linux with an in-memory view.

Search orders modelled:

* Windows, ``LoadLibrary`` with SafeDllSearchMode on (the default): the application's directory
  (the environment's ``python.exe``, i.e. the prefix), the system directory (System32), the 16-bit
  system directory (System), the Windows directory, the current directory, then PATH in order.
  Source: https://learn.microsoft.com/en-us/windows/win32/dlls/dynamic-link-library-search-order
  (a stray ``cudnn64_7.dll`` in System32 therefore beats every PATH entry).
* Linux, ``dlopen`` of a bare name: LD_LIBRARY_PATH, then the calling library's RUNPATH (TensorFlow
  wheels use RUNPATH; modelled as ``PREFIX/lib``), then ``/etc/ld.so.cache`` (``ldconfig -p``),
  then ``/lib`` and ``/usr/lib``. Source: ld.so(8). So LD_LIBRARY_PATH shadows the environment's
  own CUDA (tensorflow/tensorflow#60750).

Library names TensorFlow's loader asks for, per CUDA/cuDNN major (read verbatim in TensorFlow
logs quoted in public issues: ``cudart64_100.dll``/``libcudart.so.10.0`` and
``cublas64_100.dll``/``libcublas.so.10.0`` for CUDA 10.0 (#42156, #43138); ``cudart64_101.dll``,
``cublas64_10.dll``, ``libcudart.so.10.1``, ``libcublas.so.10`` for 10.1 (#41909, #43945);
``cudart64_110.dll``, ``libcudart.so.11.0``, ``libcublas.so.11`` for 11.x (#57103,
NVIDIA/tensorflow#110); ``cudnn64_7.dll``/``libcudnn.so.7`` and ``cudnn64_8.dll``/``libcudnn.so.8``
(#47606, #45200); CUDA 12/13 keep only the major: ``libcudart.so.13`` in the H200 fixture).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Literal, Protocol

from envfactory.catalog.model import Combo, OperatingSystem
from envfactory.diagnose import loadcheck, tfcheck

Origin = Literal[
    "KnownDLLs",
    "module",
    "add_dll_directory",
    "application",
    "system",
    "windows",
    "cwd",
    "PATH",
    "LD_LIBRARY_PATH",
    "RUNPATH",
    "ld.so.cache",
    "default",
]


# --------------------------------------------------------------------------------------------
# Library names


@dataclass(frozen=True)
class LibraryName:
    role: Literal["cudart", "cublas", "cudnn"]
    file: str


def library_names(combo: Combo, os_name: OperatingSystem) -> tuple[LibraryName, ...]:
    """The CUDA runtime, cuBLAS and cuDNN file names TensorFlow of this combo loads."""
    major, minor = (int(p) for p in combo.cuda.value.split(".")[:2])
    cudnn_major = combo.cudnn.value.split(".")[0]
    # the Linux soname's version; the Windows DLL carries the same digits without the dot
    # (libcudart.so.10.0 / cudart64_100.dll, libcublas.so.10 / cublas64_10.dll)
    cudart_version = f"{major}.{minor}" if major == 10 else ("11.0" if major == 11 else str(major))
    cublas_version = ("10.0" if minor == 0 else "10") if major == 10 else str(major)

    def file_name(stem: str, version: str) -> str:
        if os_name == "windows":
            return f"{stem}64_{version.replace('.', '')}.dll"
        return f"lib{stem}.so.{version}"

    cudart = file_name("cudart", cudart_version)
    cublas = file_name("cublas", cublas_version)
    cudnn = file_name("cudnn", cudnn_major)
    return (
        LibraryName("cudart", cudart),
        LibraryName("cublas", cublas),
        LibraryName("cudnn", cudnn),
    )


# --------------------------------------------------------------------------------------------
# Filesystem views and search directories


class FsView(Protocol):
    def files(self, directory: str) -> frozenset[str]:
        """The file names in ``directory`` (empty when it does not exist)."""
        ...


class RealFs:
    def files(self, directory: str) -> frozenset[str]:
        try:
            return frozenset(p.name for p in Path(directory).iterdir())
        except OSError:
            return frozenset()


class MappingFs:
    """An in-memory view ``{directory: [file names]}``; Windows paths compare case-insensitively."""

    def __init__(self, tree: Mapping[str, Sequence[str]], os_name: OperatingSystem) -> None:
        self.os_name = os_name
        self.tree = {_norm(d, os_name): frozenset(names) for d, names in tree.items()}

    def files(self, directory: str) -> frozenset[str]:
        return self.tree.get(_norm(directory, self.os_name), frozenset())

    @classmethod
    def from_listing(cls, paths: Sequence[str], os_name: OperatingSystem) -> MappingFs:
        """A view from full file paths, one a line (like ``find / -name 'libcud*'``)."""
        tree: dict[str, list[str]] = {}
        for p in paths:
            pure = PureWindowsPath(p) if os_name == "windows" else PurePosixPath(p)
            tree.setdefault(str(pure.parent), []).append(pure.name)
        return cls(tree, os_name)


def _norm(directory: str, os_name: OperatingSystem) -> str:
    if os_name == "windows":
        return str(PureWindowsPath(directory)).rstrip("\\").lower()
    return str(PurePosixPath(directory)).rstrip("/") or "/"


def _join(directory: str, name: str, os_name: OperatingSystem) -> str:
    if os_name == "windows":
        return str(PureWindowsPath(directory) / name)
    return str(PurePosixPath(directory) / name)


def split_search_path(value: str | None, os_name: OperatingSystem) -> list[str]:
    """PATH-style value to directories: ``;`` on Windows, ``:`` on Linux; empty entries dropped."""
    if not value:
        return []
    sep = ";" if os_name == "windows" else ":"
    return [p.strip().strip('"') for p in value.split(sep) if p.strip().strip('"')]


@dataclass(frozen=True)
class SearchDir:
    path: str
    origin: Origin


def search_dirs(
    os_name: OperatingSystem,
    environ: Mapping[str, str],
    prefix: str | None = None,
    cwd: str | None = None,
) -> list[SearchDir]:
    """Directories in the order the loader tries them (the ld.so cache is applied separately)."""
    dirs: list[SearchDir] = []
    if os_name == "windows":
        root = environ.get("SystemRoot") or environ.get("WINDIR") or "C:\\Windows"
        if prefix:
            dirs.append(SearchDir(prefix, "application"))
        dirs.append(SearchDir(_join(root, "System32", "windows"), "system"))
        dirs.append(SearchDir(_join(root, "System", "windows"), "system"))
        dirs.append(SearchDir(root, "windows"))
        if cwd:
            dirs.append(SearchDir(cwd, "cwd"))
        dirs.extend(SearchDir(d, "PATH") for d in split_search_path(environ.get("PATH"), os_name))
    else:
        dirs.extend(
            SearchDir(d, "LD_LIBRARY_PATH")
            for d in split_search_path(environ.get("LD_LIBRARY_PATH"), os_name)
        )
        if prefix:
            dirs.append(SearchDir(_join(prefix, "lib", os_name), "RUNPATH"))
    return dirs


def variable_dirs(os_name: OperatingSystem, environ: Mapping[str, str]) -> list[SearchDir]:
    """The directories of PATH and, on Linux, LD_LIBRARY_PATH (where foreign CUDA installs hide)."""
    dirs = [SearchDir(d, "PATH") for d in split_search_path(environ.get("PATH"), os_name)]
    if os_name == "linux":
        dirs.extend(
            SearchDir(d, "LD_LIBRARY_PATH")
            for d in split_search_path(environ.get("LD_LIBRARY_PATH"), os_name)
        )
    return dirs


LINUX_DEFAULT_DIRS = ("/lib", "/usr/lib")


def parse_ldconfig(text: str) -> dict[str, tuple[str, ...]]:
    """``ldconfig -p`` output to {soname: paths in cache order}."""
    cache: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\S+) \(([^)]*)\) => (\S+)\s*$", line)
        if m:
            cache.setdefault(m[1], []).append(m[3])
    return {k: tuple(v) for k, v in cache.items()}


@dataclass(frozen=True)
class Copy:
    path: str
    origin: Origin


@dataclass(frozen=True)
class LibraryLocation:
    name: LibraryName
    copies: tuple[Copy, ...]

    @property
    def loads(self) -> Copy | None:
        return self.copies[0] if self.copies else None

    @property
    def shadowed(self) -> tuple[Copy, ...]:
        return self.copies[1:]

    def to_json(self) -> dict[str, Any]:
        """``{"role", "file", "loads": null | {"path", "origin"}, "shadowed": [...]}``: copies in
        search order, the first one is the one that loads."""
        return {
            "role": self.name.role,
            "file": self.name.file,
            "loads": {"path": self.loads.path, "origin": self.loads.origin} if self.loads else None,
            "shadowed": [{"path": c.path, "origin": c.origin} for c in self.shadowed],
        }


def locate(
    name: LibraryName,
    dirs: Sequence[SearchDir],
    fs: FsView,
    os_name: OperatingSystem,
    ldcache: Mapping[str, Sequence[str]] | None = None,
) -> LibraryLocation:
    """Every copy of ``name`` in search order (``where cudnn64_7.dll``, but in loader order)."""
    seen: set[str] = set()
    copies: list[Copy] = []

    def add(path: str, origin: Origin) -> None:
        key = _norm(path, os_name)
        if key not in seen:
            seen.add(key)
            copies.append(Copy(path, origin))

    wanted = name.file.lower() if os_name == "windows" else name.file
    for d in dirs:
        present = fs.files(d.path)
        names = {n.lower() for n in present} if os_name == "windows" else present
        if wanted in names:
            add(_join(d.path, name.file, os_name), d.origin)
    if os_name == "linux":
        for path in (ldcache or {}).get(name.file, ()):
            add(path, "ld.so.cache")
        for default in LINUX_DEFAULT_DIRS:
            if name.file in fs.files(default):
                add(_join(default, name.file, os_name), "default")
    return LibraryLocation(name, tuple(copies))


# Directories of CUDA/cuDNN installs outside any conda environment: the CUDA toolkit installers'
# default locations on Windows and Linux, versioned /usr/local/cuda-X.Y trees, cuDNN unpacked
# by hand.
_FOREIGN_CUDA = re.compile(
    r"(nvidia gpu computing toolkit[/\\]cuda|/usr/local/cuda|/opt/cuda"
    r"|[/\\]cuda-\d+(\.\d+)?([/\\]|$)"
    r"|[/\\]cudnn[^/\\]*([/\\]|$))",
    re.IGNORECASE,
)


def foreign_cuda_dirs(
    dirs: Sequence[SearchDir], os_name: OperatingSystem, prefix: str | None = None
) -> list[SearchDir]:
    """Entries of PATH / LD_LIBRARY_PATH that point into a CUDA or cuDNN install outside
    ``prefix``, each once; the environment's activation scripts drop exactly these."""
    out = []
    seen: set[tuple[str, str]] = set()
    inside = _norm(prefix, os_name) if prefix else None
    for d in dirs:
        if d.origin not in ("PATH", "LD_LIBRARY_PATH"):
            continue
        norm = _norm(d.path, os_name)
        if (norm, d.origin) in seen:
            continue  # a directory listed twice is one finding
        seen.add((norm, d.origin))
        if inside and (
            norm == inside or norm.startswith(inside + ("\\" if os_name == "windows" else "/"))
        ):
            continue
        if _FOREIGN_CUDA.search(d.path.replace("\\", "/") if os_name == "linux" else d.path):
            out.append(d)
    return out


def inside_prefix(path: str, prefix: str | None, os_name: OperatingSystem) -> bool:
    if not prefix:
        return False
    p, root = _norm(path, os_name), _norm(prefix, os_name)
    sep = "\\" if os_name == "windows" else "/"
    return p == root or p.startswith(root + sep)


# --------------------------------------------------------------------------------------------
# The three-tier TensorFlow check, run by the environment's own Python.

# The program itself is envfactory/diagnose/tfcheck.py, run as a file by the environment's Python
# (which may be 3.6, and has no envfactory): its own module, under ruff and mypy.
TF_CHECK_PROGRAM = Path(tfcheck.__file__)
TF_CHECK_MARKER = tfcheck.MARKER


@dataclass(frozen=True)
class TfCheck:
    """The three tiers, each reported on its own; ``log`` is TensorFlow's stderr (for explain)."""

    python: str
    tensorflow: str | None
    built_with_cuda: bool | None
    devices: tuple[dict[str, Any], ...] | None
    matmul: dict[str, Any] | None
    errors: Mapping[str, str]
    log: str

    def to_json(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "tensorflow": self.tensorflow,
            "built_with_cuda": self.built_with_cuda,
            "gpu_devices": list(self.devices) if self.devices is not None else None,
            "matmul": self.matmul,
            "errors": dict(sorted(self.errors.items())),
        }


def parse_tf_check(python: str, stdout: str, stderr: str, returncode: int) -> TfCheck:
    """Read the script's marker line; a crash before it is reported as an error, not raised."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(TF_CHECK_MARKER):
            data = json.loads(line[len(TF_CHECK_MARKER) :])
            devices = data.get("devices")
            return TfCheck(
                python=python,
                tensorflow=data.get("tensorflow"),
                built_with_cuda=data.get("built_with_cuda"),
                devices=tuple(devices) if devices is not None else None,
                matmul=data.get("matmul"),
                errors=dict(data.get("errors") or {}),
                log=stderr,
            )
    tail = (stderr.strip().splitlines() or ["no output"])[-1]
    return TfCheck(python, None, None, None, None, {"run": f"exit {returncode}: {tail}"}, stderr)


def env_python(prefix: Path, os_name: OperatingSystem) -> Path:
    """The environment's interpreter: a conda prefix keeps it at the top on Windows, a venv in
    ``Scripts``; both use ``bin/python`` on Linux."""
    if os_name == "windows":
        for candidate in (prefix / "python.exe", prefix / "Scripts" / "python.exe"):
            if candidate.exists():
                return candidate
        return prefix / "python.exe"
    return prefix / "bin" / "python"


def run_tf_check(prefix: Path, os_name: OperatingSystem, timeout: float = 1800) -> TfCheck:
    """Run the check with the environment's Python (a GPU start with PTX JIT can be slow)."""
    python = env_python(prefix, os_name)
    if not python.exists():
        return TfCheck(str(python), None, None, None, None, {"run": f"{python} does not exist"}, "")
    try:
        done = subprocess.run(
            [str(python), str(TF_CHECK_PROGRAM)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return TfCheck(
            str(python), None, None, None, None, {"run": f"timed out after {timeout:.0f} s"}, ""
        )
    except OSError as exc:
        return TfCheck(str(python), None, None, None, None, {"run": str(exc)}, "")
    return parse_tf_check(str(python), done.stdout, done.stderr, done.returncode)


# --------------------------------------------------------------------------------------------
# Versions of the libraries that would load, nvcc, WSL2, and the packages inside a prefix.


@dataclass(frozen=True)
class LibraryVersion:
    version: str
    how: Literal["ctypes", "file name"]


def _cudnn_version(raw: int) -> str:
    # cudnnGetVersion: major*1000 + minor*100 + patch up to cuDNN 8, major*10000 + minor*100 +
    # patch from cuDNN 9 (cudnn_version.h of each release).
    if raw >= 90000:
        return f"{raw // 10000}.{raw % 10000 // 100}.{raw % 100}"
    return f"{raw // 1000}.{raw % 1000 // 100}.{raw % 100}"


def version_from_file_name(path: str) -> LibraryVersion | None:
    """``libcudnn.so.9.14.0`` -> 9.14.0; ``cudnn64_8.dll`` -> 8; ``cudart64_100.dll`` -> 10.0,
    ``cudart64_101.dll`` -> 10.1, ``cudart64_110.dll`` -> 11.0 (CUDA's Windows names join major
    and minor in three digits: the names in ``library_names``); ``cublas64_10.dll`` -> 10."""
    name = PureWindowsPath(path).name if "\\" in path else PurePosixPath(path).name
    m = re.search(r"\.so\.(\d+(?:\.\d+)*)$", name)
    if m:
        return LibraryVersion(m[1], "file name")
    m = re.search(r"64_(\d+)\.dll$", name, re.I)
    if m is None:
        return None
    digits = m[1]
    if len(digits) == 3 and not name.lower().startswith("cudnn"):
        return LibraryVersion(f"{digits[:2]}.{digits[2]}", "file name")
    return LibraryVersion(digits, "file name")


def ctypes_library_version(role: str, path: str) -> LibraryVersion | None:
    """Ask the library itself (cudnnGetVersion, cudaRuntimeGetVersion, cublasGetProperty)."""
    import ctypes

    try:
        lib = ctypes.CDLL(path)
        if role == "cudnn":
            lib.cudnnGetVersion.restype = ctypes.c_size_t
            return LibraryVersion(_cudnn_version(int(lib.cudnnGetVersion())), "ctypes")
        if role == "cudart":
            value = ctypes.c_int()
            if lib.cudaRuntimeGetVersion(ctypes.byref(value)) != 0:
                return None
            return LibraryVersion(f"{value.value // 1000}.{value.value % 1000 // 10}", "ctypes")
        if role == "cublas":
            parts = []
            for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                value = ctypes.c_int()
                if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
                    return None
                parts.append(str(value.value))
            return LibraryVersion(".".join(parts), "ctypes")
    except (OSError, AttributeError):
        return None
    return None


@dataclass(frozen=True)
class Nvcc:
    path: str
    version: str | None


def parse_nvcc_version(text: str) -> str | None:
    """``Cuda compilation tools, release 13.0, V13.0.88`` -> 13.0."""
    m = re.search(r"release (\d+\.\d+)", text)
    return m[1] if m else None


WSL_MARKERS = ("/usr/lib/wsl/lib", "/dev/dxg")
"""WSL2 exposes the Windows driver's libcuda in /usr/lib/wsl/lib and the GPU as /dev/dxg
(NVIDIA's CUDA on WSL user guide)."""


@dataclass(frozen=True)
class PrefixPackages:
    """What an environment holds: conda records (``conda-meta/*.json``) and Python
    distributions (``*.dist-info`` / ``*.egg-info`` in its site-packages), name -> version;
    ``conda_channels`` maps conda names to the channel they came from."""

    conda: Mapping[str, str]
    conda_builds: Mapping[str, str]
    conda_channels: Mapping[str, str]
    pip: Mapping[str, str]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_prefix_packages(prefix: Path) -> PrefixPackages:
    """Read a conda prefix or a plain virtual environment without running its Python."""
    conda: dict[str, str] = {}
    builds: dict[str, str] = {}
    channels: dict[str, str] = {}
    for record in sorted((prefix / "conda-meta").glob("*.json")):
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            conda[data["name"]] = str(data.get("version", ""))
            builds[data["name"]] = str(data.get("build", ""))
            channels[data["name"]] = str(data.get("channel", ""))
    pip: dict[str, str] = {}
    sites = [*prefix.glob("lib/python3*/site-packages"), prefix / "Lib" / "site-packages"]
    for site in sites:
        for meta in sorted([*site.glob("*.dist-info"), *site.glob("*.egg-info")]):
            m = re.match(r"^(.+?)-(\d[^-]*?)(?:-py\d.*)?\.(?:dist|egg)-info$", meta.name)
            if m:
                pip.setdefault(_canonical(m[1]), m[2])
    return PrefixPackages(conda, builds, channels, pip)


# --------------------------------------------------------------------------------------------
# Measured, not predicted: the environment's own Python loads each library and names the file.

# The program is envfactory/diagnose/loadcheck.py (Python 3.6+, ctypes only), run as a file by
# the environment's Python in isolated mode (-I: neither its folder nor user site-packages on
# sys.path, no PYTHON* variables; -S: no site-packages at all).
MEASURE_PROGRAM = Path(loadcheck.__file__)
MEASURE_MARKER = loadcheck.MARKER


@dataclass(frozen=True)
class MeasuredLoad:
    """The file the environment's Python loaded for a name (None: the load failed)."""

    path: str | None
    how: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "how": self.how, "error": self.error}


def parse_measured(stdout: str) -> dict[str, MeasuredLoad]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MEASURE_MARKER):
            data = json.loads(line[len(MEASURE_MARKER) :])
            return {
                str(k): MeasuredLoad(v.get("path"), str(v.get("how", "")), v.get("error"))
                for k, v in data.items()
                if isinstance(v, dict)
            }
    return {}


def measure_loads(
    prefix: Path, os_name: OperatingSystem, requests: Sequence[tuple[str, str]]
) -> dict[str, MeasuredLoad]:
    """Run ``loadcheck.py`` with the environment's Python in this process's environment and
    current directory (the ones the prediction used); {} when there is no such Python."""
    python = env_python(prefix, os_name)
    if not requests or not python.exists():
        return {}
    module_dir = str(prefix / "Lib" / "site-packages" / "tensorflow" / "python")
    payload = json.dumps([[name, how, module_dir] for name, how in requests])
    try:
        done = subprocess.run(
            [str(python), "-I", "-S", str(MEASURE_PROGRAM), payload],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_measured(done.stdout)


def read_known_dlls() -> frozenset[str]:
    """The KnownDLLs names from the registry (Windows only; envfactory.host reads it)."""
    from envfactory import host

    key_path = r"SYSTEM\CurrentControlSet\Control\Session Manager\KnownDLLs"
    return frozenset(v.lower() for v in host.registry_values(key_path) if isinstance(v, str))


# --------------------------------------------------------------------------------------------
# The live machine, as one adapter object; tests pass a recorded one with the same attributes.


class MachineProbes(Protocol):
    os_name: OperatingSystem

    def environ(self) -> Mapping[str, str]: ...
    def cwd(self) -> str: ...
    def known_dlls(self) -> frozenset[str]: ...
    def long_paths(self) -> bool | None: ...
    def measure_loads(
        self, prefix: Path, requests: Sequence[tuple[str, str]]
    ) -> Mapping[str, MeasuredLoad]: ...
    def fs(self) -> FsView: ...
    def ldcache(self) -> Mapping[str, Sequence[str]]: ...
    def tf_check(self, prefix: Path) -> TfCheck: ...
    def library_version(self, role: str, path: str) -> LibraryVersion | None: ...
    def nvcc(self) -> Nvcc | None: ...
    def wsl(self) -> tuple[str, ...]: ...
    def packages(self, prefix: Path) -> PrefixPackages: ...


class LiveProbes:
    def __init__(self, os_name: OperatingSystem) -> None:
        self.os_name = os_name

    def environ(self) -> Mapping[str, str]:
        return dict(os.environ)

    def cwd(self) -> str:
        return str(Path.cwd())

    def known_dlls(self) -> frozenset[str]:
        return read_known_dlls() if self.os_name == "windows" else frozenset()

    def long_paths(self) -> bool | None:
        """Windows' LongPathsEnabled (envfactory.host); None on Linux."""
        from envfactory import host

        return host.long_paths_enabled() if self.os_name == "windows" else None

    def measure_loads(
        self, prefix: Path, requests: Sequence[tuple[str, str]]
    ) -> Mapping[str, MeasuredLoad]:
        return measure_loads(prefix, self.os_name, requests)

    def fs(self) -> FsView:
        return RealFs()

    def ldcache(self) -> Mapping[str, Sequence[str]]:
        if self.os_name != "linux":
            return {}
        for exe in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
            try:
                done = subprocess.run(
                    [exe, "-p"], capture_output=True, text=True, timeout=30, check=False
                )
            except (OSError, subprocess.TimeoutExpired):
                continue
            if done.returncode == 0:
                return parse_ldconfig(done.stdout)
        return {}

    def tf_check(self, prefix: Path) -> TfCheck:
        return run_tf_check(prefix, self.os_name)

    def library_version(self, role: str, path: str) -> LibraryVersion | None:
        real = os.path.realpath(path)
        return ctypes_library_version(role, real) or version_from_file_name(real)

    def nvcc(self) -> Nvcc | None:
        import shutil

        found = shutil.which("nvcc.exe" if self.os_name == "windows" else "nvcc")
        if found is None:
            return None
        try:
            done = subprocess.run(
                [found, "--version"], capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return Nvcc(found, None)
        return Nvcc(found, parse_nvcc_version(done.stdout))

    def wsl(self) -> tuple[str, ...]:
        if self.os_name != "linux":
            return ()
        found = [m for m in WSL_MARKERS if Path(m).exists()]
        try:
            release = Path("/proc/sys/kernel/osrelease").read_text(encoding="utf-8").strip()
        except OSError:
            release = ""
        if "microsoft" in release.lower():  # e.g. 5.15.153.1-microsoft-standard-WSL2
            found.append(f"kernel {release}")
        return tuple(found)

    def packages(self, prefix: Path) -> PrefixPackages:
        return read_prefix_packages(prefix)
