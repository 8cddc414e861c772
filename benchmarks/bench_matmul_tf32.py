"""Measure: the error of a 256x256 float32 matmul on the GPU with TF32 on and off, and what
doctor's matmul tier says about each. Needs PyTorch and a GPU (run it on the device machine).

    python3 benchmarks/bench_matmul_tf32.py > matmul-tf32.json

The operands are doctor's (numpy RandomState(0), standard normal, float32); the reference is
the float64 product of the same float32 values. Prints JSON: per mode the max abs error, the max
of error / (|A| @ |B|), doctor's verdict with the tolerance for that precision, and the verdict
of the old fixed check (numpy.allclose(rtol=1e-3, atol=1e-2)).
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from envfactory.diagnose.doctor import matmul_finding, matmul_tolerance

# Only the device machine has these; imported by name so the type check here needs neither.
np: Any = importlib.import_module("numpy")
torch: Any = importlib.import_module("torch")


def measure(tf32: bool) -> dict[str, Any]:
    rng = np.random.RandomState(0)
    a = rng.standard_normal((256, 256)).astype("float32")
    b = rng.standard_normal((256, 256)).astype("float32")
    expected = a.astype("float64") @ b.astype("float64")
    bound = np.abs(a).astype("float64") @ np.abs(b).astype("float64")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    got = (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy()
    diff = np.abs(got.astype("float64") - expected)
    major, minor = torch.cuda.get_device_capability()
    result = {
        "device": "/device:GPU:0",
        "max_abs_error": float(diff.max()),
        "max_error_over_bound": float((diff / bound).max()),
        "k": 256,
        "tf32_enabled": tf32,
        "compute_capability": f"{major}.{minor}",
    }
    finding = matmul_finding(result, None)
    return {
        **result,
        "doctor": {"id": finding.id, "severity": finding.severity, "message": finding.message},
        "tolerance_tf32": matmul_tolerance("tf32", 256),
        "tolerance_fp32": matmul_tolerance("fp32", 256),
        "old_allclose_passes": bool(np.allclose(got, expected, rtol=1e-3, atol=1e-2)),
    }


def main() -> None:
    out = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "tf32_on": measure(True),
        "tf32_off": measure(False),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
