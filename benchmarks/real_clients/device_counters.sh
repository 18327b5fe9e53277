#!/bin/bash
# Device call of the class-agreement validation (docs/validation.md): ceilings with this checkout's
# microbench, the GEMM clock probe, then each client under `roofscope run --counters ncu` with a
# sample per client (CLIENT:SAMPLE), one tarball each in $OUT.
#   bash benchmarks/real_clients/device_counters.sh hf_trainer_llama:300 lightning_cnn:210
set -u
. "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader > "$OUT/gpu.txt" 2>&1
python3 -m roofscope microbench --quick --out "$OUT/ceilings.json" > "$OUT/microbench.txt" 2>&1
timeout 60 python3 benchmarks/real_clients/gemm_clock_probe.py > "$OUT/gemm_probe.txt" 2>&1
for cs in "$@"; do
  NCU=1 SAMPLE="${cs#*:}" LIMIT="${LIMIT:-200}" bash benchmarks/real_clients/run_device.sh "${cs%%:*}"
done
