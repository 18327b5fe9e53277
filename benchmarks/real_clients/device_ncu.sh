#!/bin/bash
# Second device call of the real-client validation: measure the ceilings with this checkout's
# microbench (kept in $OUT), then each client under `roofscope run --counters ncu` (class agreement
# of the analytic model with the measured counters), then summarize.
#   bash benchmarks/real_clients/device_ncu.sh hf_trainer_llama lightning_cnn ...
set -u
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 OUT=${OUT:-out}
python3 -m roofscope microbench --quick --out "$OUT/ceilings.json" > "$OUT/microbench.txt" 2>&1
NCU=1 timeout "${TOTAL:-480}" bash benchmarks/real_clients/run_device.sh "$@"
runs=$(ls -d rc/*/ 2>/dev/null | sed 's:/$::')
python3 benchmarks/real_clients/summarize.py $runs > "$OUT/summary.md" 2>&1
