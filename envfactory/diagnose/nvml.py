"""Adapter for the NVIDIA driver: GPUs, driver version and CUDA driver API version.

NVML (the ``pynvml`` module of nvidia-ml-py) first; ``nvidia-smi`` as the fallback. No GPU, no
driver or no NVML library is a result with ``problems``, never an exception: every
``pynvml.NVMLError`` (including ``NVMLError_LibraryNotFound``) is caught here.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from envfactory.catalog.gpus import Capability, parse_capability, resolve_gpu
from envfactory.errors import UserInputError

ProbeSource = Literal["nvml", "nvidia-smi", "none"]


@dataclass(frozen=True)
class GpuRecord:
    index: int
    name: str
    cc: Capability | None
    memory_total_mib: int | None
    uuid: str | None
    cc_from: Literal["driver", "name", "unknown"] = "driver"


@dataclass(frozen=True)
class MachineGpus:
    """What the driver reported. ``problems`` says why a probe failed, in the order tried."""

    source: ProbeSource
    driver: str | None
    cuda_driver_version: int | None
    gpus: tuple[GpuRecord, ...]
    problems: tuple[str, ...] = field(default=())

    @property
    def cuda_driver_api(self) -> str | None:
        """The CUDA driver API as ``major.minor`` (NVML reports 13000 for 13.0)."""
        v = self.cuda_driver_version
        return None if v is None else f"{v // 1000}.{(v % 1000) // 10}"

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "driver": self.driver,
            "cuda_driver_api": self.cuda_driver_api,
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "cc": str(g.cc) if g.cc else None,
                    "cc_from": g.cc_from,
                    "memory_total_mib": g.memory_total_mib,
                    "uuid": g.uuid,
                }
                for g in self.gpus
            ],
            "problems": list(self.problems),
        }


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cc_from_name(name: str) -> tuple[Capability | None, Literal["name", "unknown"]]:
    try:
        return resolve_gpu(name).model.cc, "name"
    except UserInputError:
        return None, "unknown"


def probe_nvml(lib: Any = None) -> MachineGpus:
    """Query NVML. ``lib`` is the pynvml module (or an object with its API, for tests)."""
    if lib is None:
        import pynvml

        lib = pynvml
    try:
        lib.nvmlInit()
    except lib.NVMLError as exc:
        return MachineGpus("none", None, None, (), (f"NVML: {exc}",))
    try:
        driver = _text(lib.nvmlSystemGetDriverVersion())
        cuda = int(lib.nvmlSystemGetCudaDriverVersion())
        gpus = []
        for i in range(int(lib.nvmlDeviceGetCount())):
            handle = lib.nvmlDeviceGetHandleByIndex(i)
            major, minor = lib.nvmlDeviceGetCudaComputeCapability(handle)
            memory = lib.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuRecord(
                    index=i,
                    name=_text(lib.nvmlDeviceGetName(handle)),
                    cc=Capability(int(major), int(minor)),
                    memory_total_mib=int(memory.total) // (1024 * 1024),
                    uuid=_text(lib.nvmlDeviceGetUUID(handle)),
                )
            )
        return MachineGpus("nvml", driver, cuda, tuple(gpus))
    except lib.NVMLError as exc:
        return MachineGpus("none", None, None, (), (f"NVML: {exc}",))
    finally:
        with contextlib.suppress(lib.NVMLError):
            lib.nvmlShutdown()


_DUMP_GPU = re.compile(r"^(\d+) (.+) \((\d+), (\d+)\) (\d+) (\S+)$")


def parse_nvml_dump(text: str) -> MachineGpus:
    """Read a recorded NVML dump (shared/fixtures/gpu-probes/h200-linux/nvml.txt)."""
    driver = None
    cuda = None
    gpus = []
    for line in text.splitlines():
        if line.startswith("driver "):
            driver = line.split(None, 1)[1].strip()
        elif line.startswith("cuda_driver_version "):
            cuda = int(line.split()[1])
        elif m := _DUMP_GPU.match(line.strip()):
            gpus.append(
                GpuRecord(
                    index=int(m[1]),
                    name=m[2],
                    cc=Capability(int(m[3]), int(m[4])),
                    memory_total_mib=int(m[5]) // (1024 * 1024),
                    uuid=m[6],
                )
            )
    return MachineGpus("nvml", driver, cuda, tuple(gpus))


SMI_QUERY = (
    "--query-gpu=index,name,compute_cap,memory.total,uuid,driver_version",
    "--format=csv,noheader,nounits",
)


def parse_smi_query(text: str, cuda_api: str | None = None) -> MachineGpus:
    """Read ``nvidia-smi --query-gpu=index,name,compute_cap,memory.total,uuid,driver_version
    --format=csv,noheader,nounits``. ``compute_cap`` is missing in old drivers ("[N/A]" or a
    query error); the capability then comes from the GPU table by name."""
    gpus = []
    driver = None
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 6 or not cols[0].isdigit():
            continue
        index, name, cap, memory, uuid, driver = cols
        cc: Capability | None
        cc_from: Literal["driver", "name", "unknown"]
        try:
            cc, cc_from = parse_capability(cap), "driver"
        except UserInputError:
            cc, cc_from = _cc_from_name(name)
        gpus.append(
            GpuRecord(
                int(index), name, cc, int(memory) if memory.isdigit() else None, uuid, cc_from
            )
        )
    return MachineGpus("nvidia-smi", driver, _api_to_int(cuda_api), tuple(gpus))


def _api_to_int(api: str | None) -> int | None:
    if not api:
        return None
    m = re.match(r"(\d+)\.(\d+)", api)
    return int(m[1]) * 1000 + int(m[2]) * 10 if m else None


def parse_smi_q(text: str) -> MachineGpus:
    """Read ``nvidia-smi -q`` (which has no compute capability: it comes from the GPU table)."""
    driver = _field(text, "Driver Version")
    cuda = _field(text, "CUDA Version")
    gpus = []
    blocks = re.split(r"^GPU [0-9A-Fa-f:.]+\s*$", text, flags=re.MULTILINE)[1:]
    for i, block in enumerate(blocks):
        name = _field(block, "Product Name") or "unknown GPU"
        memory = re.search(r"FB Memory Usage\s*\n\s*Total\s*:\s*(\d+) MiB", block)
        cc, cc_from = _cc_from_name(name)
        gpus.append(
            GpuRecord(
                i,
                name,
                cc,
                int(memory[1]) if memory else None,
                _field(block, "GPU UUID"),
                cc_from,
            )
        )
    return MachineGpus("nvidia-smi", driver, _api_to_int(cuda), tuple(gpus))


def _field(text: str, key: str) -> str | None:
    m = re.search(rf"^\s*{re.escape(key)}\s*:\s*(.+?)\s*$", text, flags=re.MULTILINE)
    return m[1] if m else None


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, check=False)


def probe_smi(runner: Runner = _run, smi: str | None = None) -> MachineGpus:
    """Query ``nvidia-smi``: the CSV query first, ``-q`` when the driver lacks ``compute_cap``."""
    exe = smi or shutil.which("nvidia-smi")
    if exe is None:
        return MachineGpus("none", None, None, (), ("nvidia-smi: not found on PATH",))
    try:
        full = runner([exe, "-q"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return MachineGpus("none", None, None, (), (f"nvidia-smi: {exc}",))
    if full.returncode != 0:
        first = (full.stdout + full.stderr).strip().splitlines()[:1]
        return MachineGpus("none", None, None, (), (f"nvidia-smi: {' '.join(first) or 'failed'}",))
    detailed = parse_smi_q(full.stdout)
    try:
        query = runner([exe, *SMI_QUERY])
    except (OSError, subprocess.TimeoutExpired):
        return detailed
    if query.returncode == 0:
        quick = parse_smi_query(query.stdout, detailed.cuda_driver_api)
        if quick.gpus:
            return quick
    return detailed


def detect(lib: Any = None, runner: Runner = _run) -> MachineGpus:
    """NVML, then nvidia-smi; the problems of each failed attempt are kept."""
    first = probe_nvml(lib)
    if first.source != "none":
        return first
    second = probe_smi(runner)
    return MachineGpus(
        second.source,
        second.driver,
        second.cuda_driver_version,
        second.gpus,
        first.problems + second.problems,
    )
