#!/bin/bash
# Device call of the class-agreement validation (docs/validation.md): ceilings with this checkout's
# microbench, the GEMM clock probe, then each client under `roofscope run --counters ncu` with a
# sample per client (CLIENT:SAMPLE or CLIENT:SAMPLE:SKIP), one tarball each in $OUT. NO_MICROBENCH=1
# skips the ceilings and the probe.
#   bash benchmarks/real_clients/device_counters.sh hf_trainer_llama:300 lightning_cnn:210 hf_trainer_llama:300:700
set -u
. "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader > "$OUT/gpu.txt" 2>&1
if [ -z "${NO_MICROBENCH:-}" ]; then
  python3 -m roofscope microbench --quick --out "$OUT/ceilings.json" > "$OUT/microbench.txt" 2>&1
  timeout 60 python3 benchmarks/real_clients/gemm_clock_probe.py > "$OUT/gemm_probe.txt" 2>&1
fi
for cs in "$@"; do
  IFS=: read -r client sample skip <<< "$cs"
  NCU=1 SAMPLE="$sample" SKIP="${skip:-0}" LIMIT="${LIMIT:-200}" bash benchmarks/real_clients/run_device.sh "$client"
done
