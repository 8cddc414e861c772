"""Which combos run on this hardware, best first: native kernels before PTX JIT, then fewer
unconfirmed catalog facts, then newest TF.

Pure: the GPUs come from the caller (``--gpu``/``--cc``, or what ``doctor`` detected).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envfactory.catalog.model import Catalog, Platform
from envfactory.diagnose.compat import (
    Candidate,
    DriverVersion,
    GpuSpec,
    runnable_combos,
    unconfirmed_facts,
)
from envfactory.errors import UserInputError


@dataclass(frozen=True)
class TfFilter:
    """``--tf 1``, ``--tf 2`` (a major) or ``--tf 2.15`` (one series)."""

    major: int
    minor: int | None = None

    def accepts(self, series: tuple[int, int]) -> bool:
        return series[0] == self.major and (self.minor is None or series[1] == self.minor)

    def __str__(self) -> str:
        return f"{self.major}" if self.minor is None else f"{self.major}.{self.minor}"


def parse_tf_filter(text: str) -> TfFilter:
    match = re.fullmatch(r"(\d+)(?:\.(\d+))?", text.strip())
    if not match:
        raise UserInputError(
            f"'{text}' is not a TensorFlow version filter", "use --tf 1, --tf 2 or --tf 2.15"
        )
    return TfFilter(int(match[1]), int(match[2]) if match[2] is not None else None)


@dataclass(frozen=True)
class Recommendation:
    platform: Platform
    gpus: tuple[GpuSpec, ...]
    driver: DriverVersion | None
    tf: TfFilter | None
    candidates: tuple[Candidate, ...]
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"platform", "gpus": [{"name", "cc"}], "driver", "tf", "combos": [{"combo",
        "tensorflow", "cuda", "cudnn", "verdict", "unconfirmed", "why": [sentences]}]}``; ``combos``
        is ordered best first (native before JIT, then fewer unconfirmed facts, then newest
        TensorFlow: ``recommend --help``), everything else is fixed; ``notes``: what the
        platform rules out (TF >= 2.11 on native Windows)."""
        return {
            "platform": self.platform,
            "gpus": [{"name": g.name, "cc": str(g.cc)} for g in self.gpus],
            "driver": str(self.driver) if self.driver else None,
            "tf": str(self.tf) if self.tf else None,
            "combos": [
                {
                    "combo": c.combo.name,
                    "tensorflow": c.combo.tensorflow.value,
                    "cuda": c.combo.cuda.value,
                    "cudnn": c.combo.cudnn.value,
                    "verdict": c.assessment.verdict,
                    "unconfirmed": unconfirmed_facts(c.combo, self.platform),
                    "why": list(c.assessment.reasons),
                }
                for c in self.candidates
            ],
            "notes": list(self.notes),
        }


def recommend(
    catalog: Catalog,
    gpus: Sequence[GpuSpec],
    platform: Platform,
    driver: DriverVersion | None,
    tf: TfFilter | None = None,
) -> Recommendation:
    """The combos that run on every one of ``gpus``, best first."""
    if not gpus:
        raise UserInputError("no GPU to recommend for", "give --gpu NAME or --cc X.Y")
    found = [
        c
        for c in runnable_combos(catalog, gpus, platform, driver)
        if tf is None or tf.accepts(c.combo.tf_series)
    ]
    notes: list[str] = []
    no_windows = sorted(
        c.name
        for c in catalog.combos.values()
        if platform == "win-64"
        and platform not in c.platforms
        and c.tf_series > WINDOWS_GPU_LAST_SERIES
        and (tf is None or tf.accepts(c.tf_series))
    )
    if no_windows:
        notes.append(
            f"TensorFlow {WINDOWS_GPU_LAST_SERIES[0]}.{WINDOWS_GPU_LAST_SERIES[1] + 1} and newer "
            "have no native-Windows GPU build (TensorFlow's Windows tested-build table: 'GPU "
            "support on native-Windows is only available for 2.10 or earlier versions'): for "
            f"those ({len(no_windows)} combos) use WSL2 with a linux-64 environment "
            "('envfactory recommend --platform linux-64'), or TensorFlow <= 2.10 natively"
        )
    return Recommendation(platform, tuple(gpus), driver, tf, tuple(found), tuple(notes))


WINDOWS_GPU_LAST_SERIES = (2, 10)
"""The last TensorFlow series with a native-Windows GPU build (source tf-tested-windows)."""
