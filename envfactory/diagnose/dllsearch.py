"""Which copy of a DLL Windows loads for TensorFlow in an environment, and why.

Pure: it works on the environment's Python version, the variables, the current directory, the
KnownDLLs list and a filesystem view (``probes.FsView``), so recorded Windows machines can be
checked anywhere. The rules, from Microsoft's "Dynamic-link library search order"
(https://learn.microsoft.com/windows/win32/dlls/dynamic-link-library-search-order) and
``LoadLibraryExW`` / ``SetDefaultDllDirectories`` pages
(https://learn.microsoft.com/windows/win32/api/libloaderapi/nf-libloaderapi-loadlibraryexw):

* A name in KnownDLLs (``HKLM\\SYSTEM\\CurrentControlSet\\Control\\Session Manager\\KnownDLLs``)
  always loads from System32, and a module already loaded under the same name is reused.
* The *standard* order (SafeDllSearchMode on, the default): the application's folder (that of
  ``python.exe``: the prefix), System32, the 16-bit System folder, the Windows folder, the
  current directory, then PATH in order.
* ``LOAD_WITH_ALTERED_SEARCH_PATH`` with a full path (how CPython <= 3.7 loads an extension
  module, ``Python/dynload_win.c``): the module's own folder takes the application folder's place
  for its dependencies; the rest is the standard order.
* ``LOAD_LIBRARY_SEARCH_DEFAULT_DIRS`` (CPython >= 3.8: ``ctypes`` for a bare name, and
  extension modules with ``LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR`` for their dependencies;
  https://docs.python.org/3/whatsnew/3.8.html#bpo-36085-whatsnew): the module's folder (for a
  dependency), the application folder, folders added with ``AddDllDirectory`` /
  ``os.add_dll_directory``, System32. PATH and the current directory are not searched.
* conda's Python >= 3.8 adds ``Library\\mingw-w64\\bin``, ``Library\\usr\\bin``,
  ``Library\\bin``, ``Scripts`` and ``bin`` of its prefix with ``AddDllDirectory`` at start-up;
  up to 3.10 ``CONDA_DLL_SEARCH_MODIFICATION_ENABLE`` also adds the PATH entries
  (conda-forge/python-feedstock, recipe/patches/0007-Add-CondaEcosystemModifyDllSearchPath.patch
  @ 0c641ebb: "CONDA_DLL_SEARCH_MODIFICATION=1 ... deprecated in 3.10 and removed in 3.11").

How TensorFlow asks for each library (so which rule applies):

* TF 1.13 - 2.0: ``tensorflow/python/platform/self_check.py`` preloads ``msvcp140.dll``, the CUDA
  runtime and cuDNN with ``ctypes.WinDLL(name)`` before the native module is imported; the module's
  own import of the same name then reuses that copy. Other CUDA DLLs (cuBLAS) are load-time
  dependencies of ``_pywrap_tensorflow_internal.pyd``.
* TF >= 2.1: ``self_check`` preloads ``msvcp140.dll`` and ``msvcp140_1.dll``; CUDA libraries are
  loaded by TensorFlow itself with ``LoadLibraryExW(name, NULL, LOAD_WITH_ALTERED_SEARCH_PATH)``
  (``tensorflow/core/platform/windows/load_library.cc``): the standard order, whatever the
  Python version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PureWindowsPath
from typing import Any, Literal

from envfactory.diagnose.probes import FsView, split_search_path

Loader = Literal["ctypes", "extension", "tensorflow"]
WinOrigin = Literal[
    "KnownDLLs", "module", "application", "add_dll_directory", "system", "windows", "cwd", "PATH"
]

VC_RUNTIME = ("msvcp140.dll", "msvcp140_1.dll")
"""The Visual C++ runtime TensorFlow's self-check preloads (``msvcp140_1.dll`` from TF 2.1)."""

CONDA_DLL_DIRS = ("Library\\mingw-w64\\bin", "Library\\usr\\bin", "Library\\bin", "Scripts", "bin")
"""What conda's Python >= 3.8 passes to ``AddDllDirectory`` at start-up, relative to its prefix."""

MODULE_DIR = "Lib\\site-packages\\tensorflow\\python"
"""Where ``_pywrap_tensorflow_internal.pyd`` lives, relative to the prefix (TF 1.x and 2.x)."""


@dataclass(frozen=True)
class WindowsProcess:
    """What decides a load in the environment's ``python.exe``."""

    python: tuple[int, int]
    conda_python: bool
    prefix: str | None
    cwd: str | None
    environ: Mapping[str, str]
    known_dlls: frozenset[str] = frozenset()

    @property
    def system32(self) -> str:
        return str(PureWindowsPath(self.windows_dir) / "System32")

    @property
    def windows_dir(self) -> str:
        return self.environ.get("SystemRoot") or self.environ.get("WINDIR") or "C:\\Windows"

    @property
    def module_dir(self) -> str | None:
        return str(PureWindowsPath(self.prefix) / MODULE_DIR) if self.prefix else None

    def user_dirs(self) -> list[str]:
        """What ``AddDllDirectory`` holds when TensorFlow is imported (conda's start-up patch;
        with ``CONDA_DLL_SEARCH_MODIFICATION_ENABLE`` on 3.8-3.10 the PATH entries as well)."""
        if not (self.conda_python and self.prefix and self.python >= (3, 8)):
            return []
        dirs = [str(PureWindowsPath(self.prefix) / d) for d in CONDA_DLL_DIRS]
        if self.python < (3, 11) and self.environ.get("CONDA_DLL_SEARCH_MODIFICATION_ENABLE"):
            dirs += split_search_path(self.environ.get("PATH"), "windows")
        return dirs


@dataclass(frozen=True)
class Step:
    path: str
    origin: WinOrigin


def loader_for(dll: str, tensorflow: str) -> Loader:
    """How TensorFlow ``tensorflow`` (``X.Y[.Z]``) asks for ``dll`` (module docstring)."""
    name = dll.lower()
    tf = tuple(int(x) for x in re.findall(r"\d+", tensorflow)[:2])
    if name in VC_RUNTIME:
        return "ctypes"
    if tf < (2, 1):
        return "ctypes" if name.startswith(("cudart64_", "cudnn64_")) else "extension"
    return "tensorflow"


def search_order(proc: WindowsProcess, loader: Loader) -> tuple[list[Step], str]:
    """The folders the loader tries, in order, and the rule in words."""
    sys32 = proc.system32
    standard_tail = [
        Step(sys32, "system"),
        Step(str(PureWindowsPath(proc.windows_dir) / "System"), "system"),
        Step(proc.windows_dir, "windows"),
        *([Step(proc.cwd, "cwd")] if proc.cwd else []),
        *(Step(d, "PATH") for d in split_search_path(proc.environ.get("PATH"), "windows")),
    ]
    app = [Step(proc.prefix, "application")] if proc.prefix else []
    module = [Step(proc.module_dir, "module")] if proc.module_dir else []
    py = f"Python {proc.python[0]}.{proc.python[1]}"
    if loader == "tensorflow":
        rule = (
            "TensorFlow loads it with LoadLibraryExW(LOAD_WITH_ALTERED_SEARCH_PATH): the standard "
            "order (python.exe's folder, System32, System, Windows, current directory, PATH), "
            "whatever the Python version"
        )
        return app + standard_tail, rule
    if proc.python < (3, 8):
        if loader == "ctypes":
            rule = (
                f"{py} preloads it with ctypes (LoadLibrary): the standard order, python.exe's "
                "folder, System32, System, Windows, current directory, PATH"
            )
            return app + standard_tail, rule
        rule = (
            f"{py} imports TensorFlow's extension with LOAD_WITH_ALTERED_SEARCH_PATH: its folder, "
            "System32, System, Windows, current directory, PATH"
        )
        return module + standard_tail, rule
    users = [Step(d, "add_dll_directory") for d in proc.user_dirs()]
    where = "folders added with os.add_dll_directory" + (
        " (conda's Python adds Library\\bin and its siblings"
        + (", and PATH: CONDA_DLL_SEARCH_MODIFICATION_ENABLE" if len(users) > 5 else "")
        + ")"
        if users
        else ""
    )
    if loader == "ctypes":
        rule = (
            f"{py} preloads it with ctypes (LOAD_LIBRARY_SEARCH_DEFAULT_DIRS): python.exe's "
            f"folder, {where}, System32; PATH and the current directory are not searched"
        )
        return app + users + [Step(sys32, "system")], rule
    rule = (
        f"{py} imports TensorFlow's extension with LOAD_LIBRARY_SEARCH_DEFAULT_DIRS | "
        f"DLL_LOAD_DIR: its folder, python.exe's folder, {where}, System32; PATH and the "
        "current directory are not searched"
    )
    return module + app + users + [Step(sys32, "system")], rule


@dataclass(frozen=True)
class DllCopy:
    path: str
    origin: WinOrigin


@dataclass(frozen=True)
class DllLoad:
    """One DLL: the copy that would load (None: the load fails), the other copies on the
    search path after it, and where ``where NAME`` (current directory, then PATH) finds it."""

    dll: str
    loader: Loader
    rule: str
    copies: tuple[DllCopy, ...]
    where: tuple[str, ...]

    @property
    def loads(self) -> DllCopy | None:
        return self.copies[0] if self.copies else None

    @property
    def unordered(self) -> tuple[DllCopy, ...]:
        """Copies that may load instead of the first: Windows does not specify the order of
        folders added with AddDllDirectory (SetDefaultDllDirectories' page), so when the first
        copy is in one, any other copy in one may win."""
        if not self.copies or self.copies[0].origin != "add_dll_directory":
            return ()
        return tuple(c for c in self.copies[1:] if c.origin == "add_dll_directory")

    def why(self) -> str:
        c = self.loads
        if c is None:
            return f"no folder the loader searches holds {self.dll}"
        if self.unordered:
            return (
                f"{c.path} or "
                + " or ".join(u.path for u in self.unordered)
                + ": each is in a folder added with AddDllDirectory, and Windows does not "
                "specify their order"
            )
        reason = {
            "KnownDLLs": "a KnownDLL: Windows always maps System32's copy",
            "module": "the folder of TensorFlow's extension module, searched first for it",
            "application": "python.exe's folder, searched first",
            "add_dll_directory": "a folder added with AddDllDirectory",
            "system": "the system folder, searched before the current directory and PATH",
            "windows": "the Windows folder",
            "cwd": "the current directory, searched before PATH",
            "PATH": "the first PATH entry that holds it",
        }[c.origin]
        return f"{c.path}: {reason}"

    def to_json(self) -> dict[str, Any]:
        return {
            "dll": self.dll,
            "loader": self.loader,
            "rule": self.rule,
            "loads": {"path": self.loads.path, "origin": self.loads.origin} if self.loads else None,
            "why": self.why(),
            "unordered": [c.path for c in self.unordered],
            "shadowed": [{"path": c.path, "origin": c.origin} for c in self.copies[1:]],
            "where": list(self.where),
        }


def _has(fs: FsView, folder: str, dll: str) -> bool:
    return dll.lower() in {n.lower() for n in fs.files(folder)}


def where(dll: str, proc: WindowsProcess, fs: FsView) -> tuple[str, ...]:
    """What ``where NAME`` prints: the current directory, then PATH, every match."""
    folders = ([proc.cwd] if proc.cwd else []) + split_search_path(
        proc.environ.get("PATH"), "windows"
    )
    return tuple(str(PureWindowsPath(d) / dll) for d in folders if _has(fs, d, dll))


def locate_dll(dll: str, loader: Loader, proc: WindowsProcess, fs: FsView) -> DllLoad:
    steps, rule = search_order(proc, loader)
    copies: list[DllCopy] = []
    seen: set[str] = set()
    if dll.lower() in {k.lower() for k in proc.known_dlls}:
        steps = [Step(proc.system32, "KnownDLLs")]
        rule = "a KnownDLL: loaded from System32 whatever the search path"
    for step in steps:
        key = str(PureWindowsPath(step.path)).rstrip("\\").lower()
        if key in seen:
            continue
        seen.add(key)
        if _has(fs, step.path, dll):
            copies.append(DllCopy(str(PureWindowsPath(step.path) / dll), step.origin))
    return DllLoad(dll, loader, rule, tuple(copies), where(dll, proc, fs))


def locate_all(
    dlls: Sequence[str], tensorflow: str, proc: WindowsProcess, fs: FsView
) -> list[DllLoad]:
    """Each of ``dlls`` (CUDA libraries, then the VC++ runtime) as TensorFlow would load it.
    A DLL TensorFlow loads by name once: the first copy wins for the whole process."""
    return [locate_dll(d, loader_for(d, tensorflow), proc, fs) for d in dlls]


def cuda_path_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """``CUDA_PATH`` and ``CUDA_PATH_V<major>_<minor>`` (set by NVIDIA's installer), sorted."""
    return {
        k: v
        for k, v in sorted(environ.items())
        if k.upper() == "CUDA_PATH" or re.fullmatch(r"CUDA_PATH_V\d+_\d+", k, re.IGNORECASE)
    }
