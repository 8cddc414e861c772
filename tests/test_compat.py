"""compat: verdicts over a table of GPUs x combos x drivers x platforms, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envfactory.catalog.gpus import parse_capability, resolve_gpu
from envfactory.catalog.loader import load_catalog
from envfactory.catalog.model import parse_platform
from envfactory.diagnose.compat import CompatResult, GpuSpec, check, parse_driver
from envfactory.errors import UserInputError

ENVFACTORY = str(Path(sys.executable).parent / "envfactory")

# (gpu name, combo, driver or None, platform, expected verdict)
TABLE = [
    ("GTX 1080", "tf114-cuda100", "411.31", "win-64", "supported"),
    ("GeForce GTX 1080", "tf114-cuda100", "410.48", "linux-64", "supported"),
    ("RTX 3080", "tf114-cuda100", None, "linux-64", "gpu-too-new"),
    ("RTX 3080", "tf114-cuda100", "531.14", "win-64", "gpu-too-new"),
    ("RTX 4090", "tf114-cuda100", None, "linux-64", "gpu-too-new"),
    ("GTX 1080", "tf114-cuda100", "400.0", "linux-64", "driver-too-old"),
    ("GTX 1080", "tf114-cuda100", "411.30", "win-64", "driver-too-old"),
    ("RTX 4090", "tf215-cuda122", None, "win-64", "platform-unsupported"),
    ("NVIDIA H100", "tf25-cuda112", None, "linux-64", "gpu-too-new"),
    ("NVIDIA H200", "tf26-cuda112", "580.159.04", "linux-64", "gpu-too-new"),
    ("NVIDIA H200", "tf114-cuda100", "580.159.04", "linux-64", "gpu-too-new"),
    ("NVIDIA H200", "tf215-cuda122", "580.159.04", "linux-64", "ptx-jit"),
    ("NVIDIA H200", "tf212-cuda118", "580.159.04", "linux-64", "ptx-jit"),
    ("NVIDIA H200", "tf215-cuda122", "530.30.02", "linux-64", "driver-too-old"),
    ("NVIDIA A100", "tf215-cuda122", "525.60.13", "linux-64", "supported"),
    ("NVIDIA A100", "tf215-cuda122", "520.61.05", "linux-64", "driver-too-old"),
    ("Tesla K80", "tf218-cuda125", None, "linux-64", "gpu-too-old"),
    ("GTX 970", "tf218-cuda125", None, "linux-64", "gpu-too-old"),
    ("GTX 970", "tf217-cuda123", None, "linux-64", "supported"),
    ("GTX 750 Ti", "tf23-cuda101", None, "linux-64", "gpu-too-old"),
    ("GTX 750 Ti", "tf24-cuda110", None, "linux-64", "supported"),
    ("RTX 3080", "tf24-cuda110", "456.38", "win-64", "ptx-jit"),
    ("RTX 5090", "tf221-cuda125", None, "linux-64", "gpu-too-new"),
    ("Tesla T4", "tf20-cuda100", "410.48", "linux-64", "supported"),
    ("Tesla V100", "tf113-cuda100", None, "win-64", "supported"),
    ("Tesla P100", "tf210-cuda112", "452.39", "win-64", "supported"),
]


def compat_of(combo: str, gpu: str, platform: str, driver: str | None) -> CompatResult:
    """compat's answer for catalog combo ``combo`` on the named GPU (and driver, if given)."""
    catalog = load_catalog()
    model = resolve_gpu(gpu).model
    return check(
        catalog,
        catalog.combo(combo),
        GpuSpec(model.cc, model.name),
        parse_platform(platform),
        parse_driver(driver) if driver else None,
    )


@pytest.mark.parametrize(("gpu", "combo", "driver", "platform", "verdict"), TABLE)
def test_verdict_table(
    gpu: str, combo: str, driver: str | None, platform: str, verdict: str
) -> None:
    result = compat_of(combo, gpu, platform, driver)
    assert result.verdict == verdict, result.reasons


def _check(combo: str, cc: str, platform: str = "linux-64", driver: str | None = None):  # type: ignore[no-untyped-def]
    catalog = load_catalog()
    return check(
        catalog,
        catalog.combo(combo),
        GpuSpec(parse_capability(cc)),
        platform,  # type: ignore[arg-type]
        parse_driver(driver) if driver else None,
    )


def test_driver_message_names_threshold_and_numbers() -> None:
    r = _check("tf114-cuda100", "6.1", driver="400.0")
    assert r.reasons[0] == (
        "driver 400.0 is below 410.48, the driver CUDA 10.0.130 ships with "
        "(CUDA 10.x has no minor-version compatibility)"
    )
    assert r.fix is not None and r.fix.driver == "410.48"


def test_floor_route_explains_minor_version_compat() -> None:
    r = _check("tf215-cuda122", "8.0", driver="520.61.05")
    assert r.verdict == "driver-too-old"
    assert "525.60.13" in r.reasons[0] and "minor-version-compatibility floor" in r.reasons[0]
    assert "535.54.03" in r.reasons[0]  # the toolkit's own driver, for contrast


def test_fix_is_a_combo_that_really_is_supported() -> None:
    catalog = load_catalog()
    for combo, cc, platform in [
        ("tf114-cuda100", "8.6", "linux-64"),
        ("tf114-cuda100", "8.9", "win-64"),
        ("tf218-cuda125", "5.2", "linux-64"),
        ("tf215-cuda122", "8.6", "win-64"),
    ]:
        r = _check(combo, cc, platform)
        assert r.fix is not None and r.fix.combo is not None, (combo, cc)
        again = check(
            catalog,
            catalog.combo(r.fix.combo),
            GpuSpec(parse_capability(cc)),
            parse_platform(platform),
            None,
        )
        assert again.verdict == "supported", (combo, cc, r.fix)


def test_ptx_jit_says_slow_and_how_to_keep_the_cache() -> None:
    r = _check("tf215-cuda122", "9.0")
    text = " ".join(r.reasons)
    assert "compute_90" in text and "slow" in text and "CUDA_CACHE_MAXSIZE" in text


def test_gpu_names_resolve_tolerantly() -> None:
    assert resolve_gpu("RTX 3080").model.cc == parse_capability("8.6")
    assert resolve_gpu("GeForce RTX 3080 Ti").model.cc == parse_capability("8.6")
    assert resolve_gpu("NVIDIA H200").model.cc == parse_capability("9.0")
    assert resolve_gpu("NVIDIA A100-SXM4-80GB").model.name == "NVIDIA A100"
    assert resolve_gpu("NVIDIA RTX 4000 Ada Generation").model.cc == parse_capability("8.9")
    assert resolve_gpu("Quadro RTX 4000").model.cc == parse_capability("7.5")
    with pytest.raises(UserInputError) as err:
        resolve_gpu("TITAN X")
    assert "ambiguous" in err.value.message
    with pytest.raises(UserInputError) as err:
        resolve_gpu("Radeon RX 7900")
    assert err.value.hint is not None and "--cc" in err.value.hint


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVFACTORY, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_cli_json_and_exit_codes() -> None:
    ok = run(
        "compat",
        "tf114-cuda100",
        "--gpu",
        "GTX 1080",
        "--driver",
        "411.31",
        "--platform",
        "win-64",
        "--json",
    )
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["verdict"] == "supported" and data["fix"] is None and data["gpu"]["cc"] == "6.1"
    bad = run("compat", "tf114-cuda100", "--gpu", "RTX 3080", "--json")
    assert bad.returncode == 3
    data = json.loads(bad.stdout)
    assert data["verdict"] == "gpu-too-new" and data["fix"]["combo"]
    win = run("compat", "tf215-cuda122", "--cc", "8.9", "--platform", "win-64", "--json")
    assert win.returncode == 3 and json.loads(win.stdout)["verdict"] == "platform-unsupported"
    unknown = run("compat", "tf114-cuda100", "--gpu", "RTX 9090")
    assert unknown.returncode == 1
    assert "unknown GPU 'RTX 9090'" in unknown.stderr and "--cc" in unknown.stderr


def test_fix_prefers_a_combo_whose_facts_are_confirmed() -> None:
    from envfactory.diagnose.compat import unconfirmed_facts

    catalog = load_catalog()
    r = _check("tf114-cuda100", "8.6")  # an RTX 30xx on CUDA 10.0
    assert r.verdict == "gpu-too-new" and r.fix is not None and r.fix.combo is not None
    # several combos run natively on 8.6; some rest on recipe-only build strings
    assert unconfirmed_facts(catalog.combo("tf28-cuda113"), "linux-64") > 0
    assert unconfirmed_facts(catalog.combo(r.fix.combo), "linux-64") == 0
