"""The three-tier TensorFlow check, run by the environment's own Python (``probes.run_tf_check``
runs this file as ``python tfcheck.py``): TensorFlow imports and was built with CUDA, it lists
the GPUs, and a 256x256 matmul on the first GPU agrees with numpy's float64 product. It prints
one line, ``MARKER`` then JSON; each tier's failure goes into ``errors`` and the later tiers run
on (a crash before the line is reported by ``probes.parse_tf_check``).

The environment's Python may be as old as 3.6 (TF 1.13-1.15 combos), and it has no envfactory
installed: this file imports only the standard library, numpy and TensorFlow, and is written for
Python 3.6 -- no ``from __future__ import annotations``, annotations from ``typing`` only
(Python 3.6 evaluates them), no walrus, no f-string ``=``. tests/test_probes_envside.py checks
that against Python 3.6's grammar and runs the file.
"""

import json
import os
import sys
from typing import Any, Dict

MARKER = "ENVFACTORY_TF_CHECK "


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def main() -> None:
    # Run as a file, Python puts this file's folder first on sys.path; ``python -c`` (how
    # ``import tensorflow`` is tried by hand, and how this check ran when it was a string) puts
    # the current directory there instead. Do the same, so TensorFlow is found where it was.
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == here:
        sys.path[0] = ""
    out: Dict[str, Any] = {
        "tensorflow": None,
        "built_with_cuda": None,
        "devices": None,
        "matmul": None,
        "errors": {},
    }
    try:
        import numpy as np  # type: ignore[import-not-found,import-untyped,unused-ignore]
        import tensorflow as tf  # type: ignore[import-not-found,import-untyped,unused-ignore]

        out["tensorflow"] = tf.__version__
    except Exception as exc:
        out["errors"]["import"] = _error(exc)
        print(MARKER + json.dumps(out))
        sys.exit(0)
    try:
        out["built_with_cuda"] = bool(tf.test.is_built_with_cuda())
    except Exception as exc:
        out["errors"]["built_with_cuda"] = _error(exc)
    try:
        from tensorflow.python.client import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
            device_lib,
        )

        out["devices"] = [
            {
                "name": d.name,
                "memory_bytes": int(d.memory_limit),
                "description": d.physical_device_desc,
            }
            for d in device_lib.list_local_devices()
            if d.device_type == "GPU"
        ]
    except Exception as exc:
        out["errors"]["devices"] = _error(exc)
    try:
        out["matmul"] = _matmul(np, tf, out["devices"])
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        out["errors"]["matmul"] = f"{type(exc).__name__}: {first}"
    print(MARKER + json.dumps(out))


def _matmul(np: Any, tf: Any, devices: Any) -> Dict[str, Any]:
    """A 256x256 float32 product on the first GPU against numpy's float64 one: the largest
    error, and the largest relative to |a|.|b| (the size of the terms summed)."""
    rng = np.random.RandomState(0)
    a = rng.standard_normal((256, 256)).astype("float32")
    b = rng.standard_normal((256, 256)).astype("float32")
    expected = a.astype("float64").dot(b.astype("float64"))
    bound = np.abs(a).astype("float64").dot(np.abs(b).astype("float64"))
    try:
        tf32 = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    except Exception:
        tf32 = False  # TF < 2.4 has no TF32
    if tf.executing_eagerly():
        with tf.device("/GPU:0"):
            c = tf.matmul(tf.constant(a), tf.constant(b))
        got, device = c.numpy(), c.device
    else:
        with tf.device("/GPU:0"):
            c = tf.matmul(tf.constant(a), tf.constant(b))
        config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
        with tf.compat.v1.Session(config=config) as sess:
            got = sess.run(c)
        device = c.device
    diff = np.abs(got.astype("float64") - expected)
    cc = None
    for d in devices or []:
        desc = d.get("description") or ""
        if "compute capability:" in desc:
            cc = desc.split("compute capability:")[1].strip().split(",")[0].strip()
            break
    return {
        "device": device,
        "max_abs_error": float(np.max(diff)),
        "max_error_over_bound": float(np.max(diff / bound)),
        "k": 256,
        "tf32_enabled": tf32,
        "compute_capability": cc,
    }


if __name__ == "__main__":
    main()
