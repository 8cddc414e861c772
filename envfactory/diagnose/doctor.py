"""Diagnose this machine against a combo: GPUs and driver, library search order, TensorFlow.

``diagnose`` is pure given the probe results (the GPUs the driver reported and a
``MachineProbes`` adapter for the environment, the filesystem, the ld.so cache and the
``--prefix`` TensorFlow check); the live adapters are ``nvml.detect`` and ``probes.LiveProbes``,
tests pass recorded ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envfactory.catalog.model import Catalog, Combo, Platform, os_of
from envfactory.diagnose.compat import CompatResult, GpuSpec, check, parse_driver
from envfactory.diagnose.explain import explain
from envfactory.diagnose.nvml import MachineGpus
from envfactory.diagnose.probes import (
    LibraryLocation,
    MachineProbes,
    SearchDir,
    TfCheck,
    foreign_cuda_dirs,
    inside_prefix,
    library_names,
    locate,
    search_dirs,
    variable_dirs,
)
from envfactory.errors import UserInputError

Severity = Literal["problem", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    message: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "message": self.message, "fix": self.fix}


@dataclass(frozen=True)
class DoctorReport:
    platform: Platform
    combo: str | None
    prefix: str | None
    machine: MachineGpus
    compat: tuple[CompatResult, ...]
    libraries: tuple[LibraryLocation, ...]
    foreign_dirs: tuple[SearchDir, ...]
    tensorflow: TfCheck | None
    findings: tuple[Finding, ...]

    @property
    def problems(self) -> int:
        return sum(1 for f in self.findings if f.severity == "problem")

    def to_json(self) -> dict[str, Any]:
        """``{"platform", "combo", "prefix", "driver": {"source", "driver", "cuda_driver_api",
        "gpus": [...], "problems": [...]}, "compat": [compat JSON per GPU, in GPU order],
        "libraries": [{"role", "file", "loads", "shadowed"}], "foreign_cuda_dirs": [{"path",
        "origin"}], "tensorflow": null | {three tiers}, "findings": [{"id", "severity", "message",
        "fix"}], "problems": N}``. Lists follow search or GPU order; findings are sorted by
        severity, then id."""
        return {
            "platform": self.platform,
            "combo": self.combo,
            "prefix": self.prefix,
            "driver": self.machine.to_json(),
            "compat": [c.to_json() for c in self.compat],
            "libraries": [lib.to_json() for lib in self.libraries],
            "foreign_cuda_dirs": [{"path": d.path, "origin": d.origin} for d in self.foreign_dirs],
            "tensorflow": self.tensorflow.to_json() if self.tensorflow else None,
            "findings": [f.to_json() for f in self.findings],
            "problems": self.problems,
        }


_ORDER = {"problem": 0, "warning": 1, "info": 2}


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
        m = tf.matmul
        if m and m.get("ok"):
            findings.append(
                Finding(
                    "tf-matmul",
                    "info",
                    f"a 256x256 matmul on {m.get('device')} matches numpy "
                    f"(max abs error {m.get('max_abs_error'):.2e})",
                )
            )
        else:
            why = tf.errors.get("matmul") or (
                f"result differs from numpy (max abs error {m.get('max_abs_error')}) or ran on "
                f"{m.get('device')}"
                if m
                else "not run"
            )
            findings.append(
                Finding("tf-matmul-failed", "problem", f"matmul on /GPU:0 failed: {why}")
            )
    for problem in explain(tf.log).problems:
        findings.append(
            Finding(
                f"log-{problem.id}",
                "problem" if problem.id != "numpy-too-new" else "warning",
                f"TensorFlow's log: {problem.cause} ({problem.lines[0]})",
                problem.fix,
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
    foreign = foreign_cuda_dirs(variable_dirs(os_name, environ), os_name, prefix_text)
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
    if combo is not None:
        fs = probes.fs()
        cache = probes.ldcache()
        locations = [locate(n, dirs, fs, os_name, cache) for n in library_names(combo, os_name)]
        findings.extend(_library_findings(locations, prefix_text, platform))
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
        foreign_dirs=tuple(foreign),
        tensorflow=tf,
        findings=tuple(findings),
    )
