#!/usr/bin/env bash
# Run `envfactory doctor` on a GPU machine that has no package registry.
#
# Usage: scripts/device-doctor.sh WHEELS_DIR [OUT_DIR]
#
#   WHEELS_DIR  the envfactory wheel and every dependency wheel, made where PyPI is reachable:
#                 .venv/bin/pip wheel . -w wheels/        (envfactory + all its dependencies)
#   OUT_DIR     where the JSON reports go (default: $OUT if set, else ./device-doctor-out)
#
# It creates a fresh venv, installs envfactory from WHEELS_DIR only (--no-index), and runs
#   envfactory doctor --json tf114-cuda100   -> OUT_DIR/doctor-tf114-cuda100.json
#   envfactory doctor --json tf215-cuda122   -> OUT_DIR/doctor-tf215-cuda122.json
# plus nvidia-smi for the record. doctor exits 3 when it finds problems (tf114-cuda100 on an
# H200 must: gpu-too-new); the script records each exit code and fails only if a report is not
# valid JSON. Expected on an H200: one GPU, compute capability 9.0, driver as nvidia-smi says,
# tf114-cuda100 gpu-too-new, tf215-cuda122 ptx-jit (its build's list: SASS up to sm_80, PTX 9.0).
set -euo pipefail

wheels=${1:?usage: scripts/device-doctor.sh WHEELS_DIR [OUT_DIR]}
out=${2:-${OUT:-device-doctor-out}}
python=${PYTHON:-python3}
mkdir -p "$out"
venv=$(mktemp -d)/venv

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --no-index --find-links "$wheels" envfactory
"$venv/bin/envfactory" --version | tee "$out/envfactory-version.txt"
{ nvidia-smi || true; } > "$out/nvidia-smi.txt" 2>&1

status=0
for combo in tf114-cuda100 tf215-cuda122; do
    rc=0
    "$venv/bin/envfactory" doctor --json "$combo" > "$out/doctor-$combo.json" 2> "$out/doctor-$combo.stderr" || rc=$?
    echo "$rc" > "$out/doctor-$combo.rc"
    if "$venv/bin/python" - "$out/doctor-$combo.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
gpus = data["driver"]["gpus"]
print(f"{data['combo']}: driver {data['driver']['driver']} (CUDA driver API "
      f"{data['driver']['cuda_driver_api']}), GPUs "
      + ", ".join(f"{g['name']} cc {g['cc']}" for g in gpus)
      + "; verdicts " + ", ".join(c["verdict"] for c in data["compat"])
      + f"; {data['problems']} problem(s)")
PY
    then echo "  (doctor exit code $rc)"; else status=1; echo "doctor $combo: no valid JSON (exit $rc)" >&2; fi
done
exit "$status"
