#!/bin/bash
# One device call for the real-client validation (docs/validation.md): install the wheels the GPU
# image lacks (msgspec, nvtx: carried in .whl/), then run_device.sh on the clients given, then
# summarize every Run into $OUT/summary.md. Run from the repository root on the GPU machine:
#   bash benchmarks/real_clients/device_batch.sh hf_trainer_llama lightning_cnn ...
set -u
. "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
timeout "${TOTAL:-480}" bash benchmarks/real_clients/run_device.sh "$@"
runs=$(ls -d rc/*/ 2>/dev/null | sed 's:/$::' | grep -v '_compile$')
python3 benchmarks/real_clients/summarize.py $runs > "$OUT/summary.md" 2>&1
