#!/bin/bash
# Second device call of the real-client validation: measure the ceilings with this checkout's
# microbench (kept in $OUT), then each client under `roofscope run --counters ncu` (class agreement
# of the analytic model with the measured counters), then summarize.
#   bash benchmarks/real_clients/device_ncu.sh hf_trainer_llama lightning_cnn ...
set -u
. "$(dirname "$0")/device_env.sh"
python3 -m roofscope microbench --quick --out "$OUT/ceilings.json" > "$OUT/microbench.txt" 2>&1
NCU=1 timeout "${TOTAL:-480}" bash benchmarks/real_clients/run_device.sh "$@"
runs=$(ls -d rc/*/ 2>/dev/null | sed 's:/$::')
python3 benchmarks/real_clients/summarize.py $runs > "$OUT/summary.md" 2>&1
