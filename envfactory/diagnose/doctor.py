"""Diagnose this machine against a combo: GPUs and driver, library search order, TensorFlow.

``diagnose`` is pure given the probe results (the GPUs the driver reported and a
``MachineProbes`` adapter for the environment, the filesystem, the ld.so cache and the
``--prefix`` TensorFlow check); the live adapters are ``nvml.detect`` and ``probes.LiveProbes``,
tests pass recorded ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envfactory.activation.plan import is_foreign_cuda
from envfactory.catalog.model import Catalog, Combo, CondaPin, Platform, os_of
from envfactory.diagnose.compat import CompatResult, GpuSpec, check, parse_driver
from envfactory.diagnose.dllsearch import (
    VC_RUNTIME,
    DllLoad,
    WindowsProcess,
    cuda_path_variables,
    locate_all,
)
from envfactory.diagnose.explain import explain
from envfactory.diagnose.finding import Finding, Severity, count_problems
from envfactory.diagnose.nvml import MachineGpus
from envfactory.diagnose.probes import (
    Copy,
    FsView,
    LibraryLocation,
    LibraryVersion,
    MachineProbes,
    MeasuredLoad,
    Nvcc,
    PrefixPackages,
    SearchDir,
    TfCheck,
    inside_prefix,
    library_names,
    locate,
    search_dirs,
    variable_dirs,
)
from envfactory.errors import UserInputError


@dataclass(frozen=True)
class DoctorReport:
    platform: Platform
    combo: str | None
    prefix: str | None
    machine: MachineGpus
    compat: tuple[CompatResult, ...]
    libraries: tuple[LibraryLocation, ...]
    library_versions: Mapping[str, LibraryVersion]
    foreign_dirs: tuple[SearchDir, ...]
    tensorflow: TfCheck | None
    nvcc: Nvcc | None
    wsl: tuple[str, ...]
    findings: tuple[Finding, ...]
    windows: WindowsLoads | None = None
    measured: Mapping[str, MeasuredLoad] | None = None

    @property
    def problems(self) -> int:
        return count_problems(self.findings)

    def to_json(self) -> dict[str, Any]:
        """``{"platform", "combo", "prefix", "driver": {"source", "driver", "cuda_driver_api",
        "gpus": [...], "problems": [...]}, "compat": [compat JSON per GPU, in GPU order],
        "libraries": [{"role", "file", "loads", "shadowed", "version": null | {"version", "how"}}],
        "foreign_cuda_dirs": [{"path", "origin"}], "nvcc": null | {"path", "version"}, "wsl":
        [marker paths], "tensorflow": null | {three tiers}, "findings": [{"id", "severity",
        "message", "fix"}], "problems": N}``. Lists follow search or GPU order; findings are
        sorted by severity, then id."""
        return {
            "platform": self.platform,
            "combo": self.combo,
            "prefix": self.prefix,
            "driver": self.machine.to_json(),
            "compat": [c.to_json() for c in self.compat],
            "libraries": [
                {
                    **lib.to_json(),
                    "version": _version_json(self.library_versions.get(lib.name.role)),
                }
                for lib in self.libraries
            ],
            "foreign_cuda_dirs": [{"path": d.path, "origin": d.origin} for d in self.foreign_dirs],
            "nvcc": {"path": self.nvcc.path, "version": self.nvcc.version} if self.nvcc else None,
            "wsl": list(self.wsl),
            "tensorflow": self.tensorflow.to_json() if self.tensorflow else None,
            "windows": self.windows.to_json() if self.windows else None,
            "measured": {k: v.to_json() for k, v in self.measured.items()}
            if self.measured is not None
            else None,
            "findings": [f.to_json() for f in self.findings],
            "problems": self.problems,
        }


_ORDER = {"problem": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class WindowsLoads:
    """Windows' answer per DLL for the environment's Python (envfactory.diagnose.dllsearch)."""

    process: WindowsProcess
    dlls: tuple[DllLoad, ...]
    cuda_path: Mapping[str, str]
    long_paths: bool | None = None  # LongPathsEnabled (None: not known)

    def to_json(self) -> dict[str, Any]:
        """``{"python": "X.Y", "conda_python", "cwd", "module_dir", "cuda_path": {NAME: value},
        "long_paths_enabled": bool | null,
        "dlls": [{"dll", "loader", "rule", "loads", "why", "shadowed", "where"}]}``."""
        p = self.process
        return {
            "python": f"{p.python[0]}.{p.python[1]}",
            "conda_python": p.conda_python,
            "cwd": p.cwd,
            "module_dir": p.module_dir,
            "cuda_path": dict(self.cuda_path),
            "long_paths_enabled": self.long_paths,
            "dlls": [d.to_json() for d in self.dlls],
        }


def _python_of(
    combo: Combo, packages: PrefixPackages | None, prefix: str | None, fs: FsView
) -> tuple[tuple[int, int], bool]:
    """The environment's Python and whether it is conda's build (which adds its prefix's DLL
    folders at start-up): its conda record; else the ``python3XY.dll`` beside python.exe (a
    Python that is not conda's); else, with no environment, the combo's default (conda's)."""
    if packages is not None and packages.conda.get("python"):
        found = _tuple(packages.conda["python"])
        if len(found) >= 2:
            return (found[0], found[1]), True
    if prefix is not None:
        for name in sorted(fs.files(prefix)):
            m = re.fullmatch(r"python3(\d+)\.dll", name, re.IGNORECASE)
            if m:
                return (3, int(m[1])), False
    default = _tuple(combo.python_default)
    return (default[0], default[1]), prefix is None


def _windows_loads(
    combo: Combo, probes: MachineProbes, prefix: str | None, packages: PrefixPackages | None
) -> WindowsLoads:
    environ = probes.environ()
    python, conda = _python_of(combo, packages, prefix, probes.fs())
    process = WindowsProcess(python, conda, prefix, probes.cwd(), environ, probes.known_dlls())
    names = [n.file for n in library_names(combo, "windows")] + list(VC_RUNTIME)
    dlls = locate_all(names, combo.tensorflow.value, process, probes.fs())
    return WindowsLoads(process, tuple(dlls), cuda_path_variables(environ), probes.long_paths())


def _windows_findings(w: WindowsLoads) -> list[Finding]:
    findings: list[Finding] = []
    for d in w.dlls:
        if d.dll.lower() in VC_RUNTIME:
            if d.loads is None:
                findings.append(
                    Finding(
                        "vc-runtime-missing",
                        "problem",
                        f"{d.dll} would not load ({d.rule}): TensorFlow's self-check stops "
                        "the import",
                        "install the Microsoft Visual C++ 2015-2022 redistributable (x64)",
                    )
                )
            continue
        if len(d.where) > 1:
            findings.append(
                Finding(
                    "where-several",
                    "warning",
                    f"'where {d.dll}' finds {len(d.where)} copies: " + "; ".join(d.where),
                    "keep one copy on PATH: the environment's own (activation drops foreign "
                    "CUDA folders)",
                )
            )
        findings.append(
            Finding(
                "dll-loads",
                "info",
                f"{d.dll} would load from {d.why()} [{d.rule}]"
                if d.loads
                else f"{d.dll} would not load: {d.why()} [{d.rule}]",
            )
        )
    if w.long_paths is False:
        findings.append(
            Finding(
                "long-paths-disabled",
                "info",
                "LongPathsEnabled is off: no program here opens a file whose path is over "
                "259 characters (create checks an environment's paths against this limit)",
                "to keep environments deep in your folders, enable long paths: "
                "https://learn.microsoft.com/windows/win32/fileio/maximum-file-path-limitation",
            )
        )
    if w.cuda_path:
        findings.append(
            Finding(
                "cuda-path-variables",
                "info",
                "CUDA install variables: "
                + ", ".join(f"{k}={v}" for k, v in w.cuda_path.items())
                + " (NVIDIA's installer sets them; TensorFlow does not read them, nvcc and "
                "build tools do)",
            )
        )
    return findings


def _as_location(combo: Combo, d: DllLoad) -> LibraryLocation:
    name = next(n for n in library_names(combo, "windows") if n.file == d.dll)
    return LibraryLocation(name, tuple(Copy(c.path, c.origin) for c in d.copies))


def _measured_findings(
    measured: Mapping[str, MeasuredLoad], predicted: Mapping[str, str | None], os_name: str
) -> list[Finding]:
    findings: list[Finding] = []
    for name, m in sorted(measured.items()):
        want = predicted.get(name)
        same = (
            (m.path or "").lower() == (want or "").lower()
            if os_name == "windows"
            else m.path == want
        )
        text = m.path or f"nothing ({m.error})"
        if want is None and m.path is None:
            same = True
        findings.append(
            Finding(
                "measured-load" if same else "measured-load-differs",
                "info" if same else "warning",
                f"the environment's Python loaded {name} from {text} ({m.how})"
                + ("" if same else f"; predicted: {want or 'no copy'}"),
                None
                if same
                else "the measurement is what happens: something this model does not see "
                "(an already loaded copy, a redirection, SxS) decides; check the file above",
            )
        )
    return findings


def _version_json(v: LibraryVersion | None) -> dict[str, str] | None:
    return {"version": v.version, "how": v.how} if v else None


def _tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


# --------------------------------------------------------------------------------------------
# The matmul tier: a tolerance derived from the precision cuBLAS computes in.

UNIT_ROUNDOFF = {"fp32": 2.0**-24, "tf32": 2.0**-10}
"""Per-operation relative error: fp32 rounds to 24 significant bits. TF32 keeps 10 explicit
mantissa bits; 2**-10 allows for truncation as well as rounding when the inputs are converted."""


def matmul_tolerance(precision: Literal["fp32", "tf32"], k: int) -> float:
    """Bound on |C - A@B| / (|A| @ |B|), element-wise, for an fp32 matmul of inner size ``k``.

    Standard forward error bound (Higham, Accuracy and Stability of Numerical Algorithms,
    section 3.5): accumulating k products in fp32 gives gamma_k = k*u/(1 - k*u) with u = 2**-24.
    With TF32 each operand is first converted to TF32 (relative error u_tf32 each), adding
    2*u_tf32. On the H200 a 256x256 TF32 matmul measured 0.0236 max abs error against float64;
    the old fixed allclose(rtol=1e-3, atol=1e-2) failed it.
    """
    u_acc = UNIT_ROUNDOFF["fp32"]
    gamma = k * u_acc / (1 - k * u_acc)
    return gamma + (2 * UNIT_ROUNDOFF["tf32"] if precision == "tf32" else 0.0)


def matmul_precision(tf32_enabled: bool | None, cc: str | None) -> Literal["fp32", "tf32"]:
    """TF32 is used when TensorFlow enables it (the default from TF 2.4) on Ampere or newer."""
    if tf32_enabled and cc and _tuple(cc) >= (8, 0):
        return "tf32"
    return "fp32"


def matmul_finding(m: Mapping[str, Any] | None, error: str | None) -> Finding:
    """The verdict of the matmul tier, saying which of its three failures it is."""
    if error or m is None:
        return Finding(
            "tf-matmul-failed", "problem", f"matmul on /GPU:0 failed: {error or 'not run'}"
        )
    device = str(m.get("device") or "")
    if "GPU" not in device.upper():
        return Finding(
            "tf-matmul-not-on-gpu",
            "problem",
            f"the matmul asked for /GPU:0 ran on {device or 'an unknown device'}, not on a GPU",
            "TensorFlow placed it elsewhere: see the GPU devices tier above",
        )
    if "max_error_over_bound" in m:
        precision = matmul_precision(m.get("tf32_enabled"), m.get("compute_capability"))
        k = int(m.get("k") or 256)
        tol = matmul_tolerance(precision, k)
        ratio = float(m["max_error_over_bound"])
        ok = ratio <= tol
        detail = (
            f"max abs error {float(m.get('max_abs_error', 0)):.2e}; error/(|A||B|) {ratio:.2e} "
            f"against {tol:.2e} allowed for {precision.upper()} (k={k})"
        )
    else:  # a check script from before the precision-aware tier
        ok = bool(m.get("ok"))
        detail = f"max abs error {m.get('max_abs_error')}"
    if ok:
        return Finding(
            "tf-matmul", "info", f"a 256x256 matmul on {device} matches numpy ({detail})"
        )
    return Finding(
        "tf-matmul-wrong",
        "problem",
        f"a 256x256 matmul on {device} differs from numpy beyond rounding ({detail})",
        "the GPU computed a wrong result: check the driver and the GPU (nvidia-smi -q for ECC "
        "errors) and the combo against the GPU with 'envfactory compat'",
    )


def _gpu_findings(
    catalog: Catalog, combo: Combo | None, platform: Platform, machine: MachineGpus
) -> tuple[list[Finding], list[CompatResult]]:
    findings: list[Finding] = []
    results: list[CompatResult] = []
    if machine.source == "none":
        why = "; ".join(machine.problems) or "no probe answered"
        findings.append(
            Finding(
                "no-nvidia-driver",
                "problem",
                f"no NVIDIA driver answered ({why})",
                "install the NVIDIA driver (or start the container with GPU access) and check "
                "that 'nvidia-smi' works",
            )
        )
        return findings, results
    if not machine.gpus:
        findings.append(
            Finding(
                "no-gpu",
                "problem",
                f"the NVIDIA driver {machine.driver} reports no GPU",
                "check CUDA_VISIBLE_DEVICES and that the GPU is attached",
            )
        )
        return findings, results
    findings.append(
        Finding(
            "driver",
            "info",
            f"driver {machine.driver} (CUDA driver API {machine.cuda_driver_api or 'unknown'}) "
            f"via {machine.source}, {len(machine.gpus)} GPU(s): "
            + ", ".join(f"{g.name} ({g.cc or 'unknown'})" for g in machine.gpus),
        )
    )
    if combo is None:
        return findings, results
    driver = parse_driver(machine.driver) if machine.driver else None
    for gpu in machine.gpus:
        if gpu.cc is None:
            findings.append(
                Finding(
                    "unknown-compute-capability",
                    "warning",
                    f"GPU {gpu.index} ({gpu.name}): the driver did not report its compute "
                    "capability and the GPU table lacks it",
                    f"run 'envfactory compat {combo.name} --cc X.Y' with its capability",
                )
            )
            continue
        result = check(catalog, combo, GpuSpec(gpu.cc, gpu.name), platform, driver)
        results.append(result)
        message = f"GPU {gpu.index} ({gpu.name}, {gpu.cc}): {combo.name} is {result.verdict}"
        message += f": {result.reasons[0]}" if result.reasons else ""
        severity: Severity = (
            "info"
            if result.verdict == "supported"
            else "warning"
            if result.verdict == "ptx-jit"
            else "problem"
        )
        findings.append(
            Finding(
                f"compat-{result.verdict}",
                severity,
                message,
                result.fix.text if result.fix else None,
            )
        )
    return findings, results


def _library_findings(
    locations: list[LibraryLocation], prefix: str | None, platform: Platform
) -> list[Finding]:
    os_name = os_of(platform)
    findings: list[Finding] = []
    for loc in locations:
        where = loc.loads
        if where is None:
            if prefix:
                findings.append(
                    Finding(
                        "library-missing",
                        "warning",
                        f"{loc.name.file} is not on the {os_name} library search path "
                        f"nor in {prefix}",
                        "recreate the environment; pip-installed CUDA wheels are found through "
                        "TensorFlow's own paths, which the TensorFlow check below tests",
                    )
                )
            continue
        own = [c for c in loc.copies if inside_prefix(c.path, prefix, os_name)]
        if prefix and own and not inside_prefix(where.path, prefix, os_name):
            findings.append(
                Finding(
                    "library-shadowed",
                    "problem",
                    f"{loc.name.file} would load from {where.path} ({where.origin}), shadowing the "
                    f"environment's own {own[0].path}",
                    f"remove {where.path} or take its directory off {where.origin}; the "
                    "environment's activation scripts drop foreign CUDA directories",
                )
            )
        elif not inside_prefix(where.path, prefix, os_name):
            findings.append(
                Finding(
                    "library-foreign",
                    "warning",
                    f"{loc.name.file} would load from {where.path} ({where.origin}), outside "
                    + (f"the environment {prefix}" if prefix else "any environment")
                    + (f"; {len(loc.shadowed)} more cop(ies) behind it" if loc.shadowed else ""),
                    "activate the combo's environment so its own copy comes first",
                )
            )
        if len(loc.copies) > 1:
            findings.append(
                Finding(
                    "library-copies",
                    "info",
                    f"{len(loc.copies)} copies of {loc.name.file}, in search order: "
                    + "; ".join(f"{c.path} ({c.origin})" for c in loc.copies),
                )
            )
    return findings


def _tf_findings(tf: TfCheck) -> list[Finding]:
    findings: list[Finding] = []
    if "run" in tf.errors or "import" in tf.errors:
        why = tf.errors.get("run") or tf.errors.get("import")
        findings.append(
            Finding("tf-import", "problem", f"TensorFlow did not import with {tf.python}: {why}")
        )
    else:
        if tf.built_with_cuda is False:
            findings.append(
                Finding(
                    "tf-cpu-build",
                    "problem",
                    f"TensorFlow {tf.tensorflow} in this environment is not built with CUDA",
                    "recreate the environment from the combo's lock (it pins the GPU build)",
                )
            )
        elif tf.built_with_cuda:
            findings.append(
                Finding(
                    "tf-built-with-cuda", "info", f"TensorFlow {tf.tensorflow} is built with CUDA"
                )
            )
        if tf.devices:
            listed = ", ".join(
                f"{d.get('name')} ({int(d.get('memory_bytes', 0)) // (1024 * 1024)} MiB)"
                for d in tf.devices
            )
            findings.append(Finding("tf-gpu-devices", "info", f"TensorFlow lists {listed}"))
        else:
            err = tf.errors.get("devices", "no GPU device listed")
            findings.append(
                Finding("tf-no-gpu-device", "problem", f"TensorFlow lists no GPU: {err}")
            )
        findings.append(matmul_finding(tf.matmul, tf.errors.get("matmul")))
    for problem in explain(tf.log).problems:
        if problem.severity == "note":
            continue
        findings.append(
            Finding(
                f"log-{problem.id}",
                "problem" if problem.id != "numpy-too-new" else "warning",
                f"TensorFlow's log: {problem.cause} ({problem.lines[0]})",
                problem.fix,
            )
        )
    return findings


def _version_findings(
    combo: Combo, locations: list[LibraryLocation], versions: Mapping[str, LibraryVersion]
) -> list[Finding]:
    findings: list[Finding] = []
    for loc in locations:
        v = versions.get(loc.name.role)
        if loc.loads is None or v is None:
            continue
        findings.append(
            Finding(
                f"{loc.name.role}-version",
                "info",
                f"{loc.loads.path} is version {v.version} (from {v.how})",
            )
        )
        if loc.name.role == "cudnn" and v.how == "ctypes":
            want = _tuple(combo.cudnn.value)[:2]
            have = _tuple(v.version)[:2]
            if have[:1] == want[:1] and have < want:
                findings.append(
                    Finding(
                        "cudnn-too-old",
                        "problem",
                        f"the cuDNN that would load is {v.version}, older than the combo's "
                        f"{combo.cudnn.value}: TensorFlow refuses a lower minor version",
                        "install the combo's cuDNN into the environment and put it first",
                    )
                )
    return findings


def _driver_cuda_finding(combo: Combo, machine: MachineGpus) -> Finding | None:
    if not machine.cuda_driver_api:
        return None
    have, want = _tuple(machine.cuda_driver_api)[:2], _tuple(combo.cuda.value)[:2]
    if have >= want:
        return Finding(
            "driver-cuda",
            "info",
            f"the driver supports CUDA up to {machine.cuda_driver_api}; {combo.name} uses CUDA "
            f"{combo.cuda.value}",
        )
    return Finding(
        "driver-cuda-too-old",
        "problem",
        f"the driver supports CUDA up to {machine.cuda_driver_api}, but {combo.name} uses CUDA "
        f"{combo.cuda.value}",
        f"install a driver for CUDA {combo.cuda.value} or newer "
        f"('envfactory compat {combo.name} --driver VERSION' gives the minimum)",
    )


def _nvcc_finding(nvcc: Nvcc | None, combo: Combo | None) -> Finding:
    if nvcc is None:
        return Finding("nvcc", "info", "no nvcc on PATH (TensorFlow does not need one)")
    message = f"nvcc on PATH: {nvcc.path}, CUDA {nvcc.version or 'unknown version'}"
    if (
        combo is not None
        and nvcc.version
        and _tuple(nvcc.version)[:2] != _tuple(combo.cuda.value)[:2]
    ):
        return Finding(
            "nvcc-other-cuda",
            "warning",
            message + f", not the combo's CUDA {combo.cuda.value}: XLA takes ptxas from PATH and "
            "may compile with it ('Your CUDA software stack is old', ptxas errors)",
            "activate the environment (its activation takes foreign CUDA off PATH)",
        )
    return Finding("nvcc", "info", message)


def _wsl_finding(markers: tuple[str, ...]) -> Finding | None:
    if not markers:
        return None
    return Finding(
        "wsl2",
        "info",
        f"WSL2 ({', '.join(markers)}): the Windows NVIDIA driver serves this Linux; its libcuda "
        "is in /usr/lib/wsl/lib",
        "never install a Linux NVIDIA driver inside WSL2; update the Windows driver instead",
    )


_WHEEL = re.compile(r"^nvidia-(?P<lib>[a-z-]+?)(?:-cu(?P<cuda>\d+))?$")
# Wheels without a -cuXX suffix (NVIDIA's CUDA 13 naming) whose version's major is the CUDA major.
_CUDA_VERSIONED = {"cublas", "cuda-runtime", "cuda-nvrtc", "cuda-cupti", "nvjitlink", "cuda-nvcc"}
_NOT_CUDA = {"ml-py", "ml-py3"}  # NVML bindings, not libraries
_CONDA_TWIN = {"cudnn": "cudnn", "cublas": "cudatoolkit", "cuda-runtime": "cudatoolkit"}


_TF_NAMES = ("tensorflow", "tensorflow-base", "tensorflow-gpu", "tensorflow-cpu")


def _mismatch_findings(
    packages: PrefixPackages, combo: Combo, platform: Platform, prefix: str
) -> list[Finding]:
    """``doctor COMBO --prefix P`` where P holds another TensorFlow, or another version of a
    package COMBO pins on this platform: every other check would judge P against the wrong
    combo."""
    found: list[str] = []
    held = {**packages.pip, **packages.conda}
    tf = next((held[n] for n in _TF_NAMES if n in held), None)
    if tf is not None and _tuple(tf)[:2] != combo.tf_series:
        found.append(f"TensorFlow {tf}, not {combo.tensorflow.value}")
    if platform in combo.platforms:
        for pin in combo.route(platform).all_pins():
            if not isinstance(pin, CondaPin):
                continue
            name = pin.name
            if name in _TF_NAMES or name not in packages.conda:
                continue
            version = packages.conda[name]
            if not (version == pin.version or version.startswith(pin.version + ".")):
                found.append(f"{name} {version}, not {pin.version}")
    if not found:
        return []
    return [
        Finding(
            "combo-prefix-mismatch",
            "warning",
            f"{prefix} does not look like {combo.name}: it holds {'; '.join(found)}",
            f"name the combo that built it (its conda-meta/envfactory.json says which lock), "
            f"or recreate it from {combo.name}'s lock with 'envfactory create {combo.name} "
            f"-p {prefix} --force'",
        )
    ]


def _wheel_findings(packages: PrefixPackages, combo: Combo | None, prefix: str) -> list[Finding]:
    """NVIDIA's pip wheels (nvidia-*-cu1x) in the environment: listed, and flagged when they
    duplicate conda's CUDA libraries or carry another CUDA major than the combo's."""
    wheels: list[tuple[str, str, str, int | None]] = []
    for name, version in sorted(packages.pip.items()):
        m = _WHEEL.match(name)
        if m is None or m["lib"] in _NOT_CUDA:
            continue
        if m["cuda"]:
            cuda: int | None = int(m["cuda"])
        elif m["lib"] in _CUDA_VERSIONED and _tuple(version):
            cuda = _tuple(version)[0]
        else:
            cuda = None
        wheels.append((name, version, m["lib"], cuda))
    if not wheels:
        return []
    findings = [
        Finding(
            "nvidia-wheels",
            "info",
            f"{len(wheels)} NVIDIA pip wheel(s) in {prefix}: "
            + ", ".join(f"{n} {v}" for n, v, _, _ in wheels),
        )
    ]
    conda_cuda = {
        n: v for n, v in packages.conda.items() if n in ("cudatoolkit", "cudnn", "cuda-cudart")
    }
    for name, version, lib, cuda in wheels:
        twin = _CONDA_TWIN.get(lib)
        if twin and twin in conda_cuda:
            findings.append(
                Finding(
                    "nvidia-wheel-duplicates-conda",
                    "warning",
                    f"pip's {name} {version} duplicates conda's {twin} {conda_cuda[twin]} in the "
                    "same environment: which copy TensorFlow loads depends on the search order",
                    "keep one source of CUDA libraries: the combo's lock says which",
                )
            )
        if combo is not None and cuda is not None and cuda != _tuple(combo.cuda.value)[0]:
            findings.append(
                Finding(
                    "nvidia-wheel-other-cuda",
                    "warning",
                    f"pip's {name} {version} is built for CUDA {cuda}, the combo uses CUDA "
                    f"{combo.cuda.value}",
                    "remove it or recreate the environment from the combo's lock",
                )
            )
    return findings


def diagnose(
    catalog: Catalog,
    combo: Combo | None,
    platform: Platform,
    machine: MachineGpus,
    probes: MachineProbes,
    prefix: Path | None = None,
) -> DoctorReport:
    """Everything ``envfactory doctor`` reports, from the probes it is given."""
    os_name = os_of(platform)
    if probes.os_name != os_name:
        raise UserInputError(
            f"cannot diagnose {platform} with {probes.os_name} probes", "use the host's platform"
        )
    if combo is not None and platform not in combo.platforms:
        combo.route(platform)  # raises the catalog's explanation
    prefix_text = str(prefix) if prefix else None
    environ = probes.environ()
    findings, compat = _gpu_findings(catalog, combo, platform, machine)
    dirs = search_dirs(os_name, environ, prefix_text, cwd=None)
    # the activation's own rule, so doctor reports exactly what the scripts take off
    foreign = [
        d for d in variable_dirs(os_name, environ) if is_foreign_cuda(d.path, os_name, prefix_text)
    ]
    for d in foreign:
        findings.append(
            Finding(
                "foreign-cuda-dir",
                "warning",
                f"{d.origin} has a CUDA/cuDNN directory outside the environment: {d.path}",
                f"take it off {d.origin} (the environment's activation scripts do this)",
            )
        )
    locations: list[LibraryLocation] = []
    versions: dict[str, LibraryVersion] = {}
    windows: WindowsLoads | None = None
    measured: Mapping[str, MeasuredLoad] | None = None
    packages = probes.packages(prefix) if prefix is not None else None
    if combo is not None:
        fs = probes.fs()
        cache = probes.ldcache()
        if os_name == "windows":
            windows = _windows_loads(combo, probes, prefix_text, packages)
            locations = [
                _as_location(combo, d) for d in windows.dlls if d.dll.lower() not in VC_RUNTIME
            ]
            findings.extend(_windows_findings(windows))
        else:
            locations = [locate(n, dirs, fs, os_name, cache) for n in library_names(combo, os_name)]
        if prefix is not None:
            if windows is not None:
                requests = [(d.dll, d.loader) for d in windows.dlls]
                predicted = {d.dll: d.loads.path if d.loads else None for d in windows.dlls}
            else:
                requests = [(loc.name.file, "ctypes") for loc in locations]
                predicted = {
                    loc.name.file: loc.loads.path if loc.loads else None for loc in locations
                }
            measured = probes.measure_loads(prefix, requests)
            findings.extend(_measured_findings(measured, predicted, os_name))
        findings.extend(_library_findings(locations, prefix_text, platform))
        for loc in locations:
            if loc.loads is not None:
                found = probes.library_version(loc.name.role, loc.loads.path)
                if found is not None:
                    versions[loc.name.role] = found
        findings.extend(_version_findings(combo, locations, versions))
        if machine.gpus:
            driver_cuda = _driver_cuda_finding(combo, machine)
            if driver_cuda is not None:
                findings.append(driver_cuda)
    nvcc = probes.nvcc()
    findings.append(_nvcc_finding(nvcc, combo))
    wsl = probes.wsl()
    wsl_finding = _wsl_finding(wsl)
    if wsl_finding is not None:
        findings.append(wsl_finding)
    if packages is not None:
        findings.extend(_wheel_findings(packages, combo, str(prefix)))
        if combo is not None:
            findings.extend(_mismatch_findings(packages, combo, platform, str(prefix)))
    tf = probes.tf_check(prefix) if prefix is not None else None
    if tf is not None:
        findings.extend(_tf_findings(tf))
    findings.sort(key=lambda f: (_ORDER[f.severity], f.id, f.message))
    return DoctorReport(
        platform=platform,
        combo=combo.name if combo else None,
        prefix=prefix_text,
        machine=machine,
        compat=tuple(compat),
        libraries=tuple(locations),
        library_versions=versions,
        foreign_dirs=tuple(foreign),
        tensorflow=tf,
        nvcc=nvcc,
        wsl=wsl,
        findings=tuple(findings),
        windows=windows,
        measured=measured,
    )
