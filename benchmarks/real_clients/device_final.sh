#!/bin/bash
# Third device call: the GPU test suite, then the Lightning client eager and with the fix the
# report now gives it (torch.compile(model, mode="reduce-overhead")), summarized in $OUT.
set -u
. "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
timeout "${TESTS_S:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -40 > "$OUT/pytest_gpu.txt"
NO_MICROBENCH=1 VARIANTS="${VARIANTS:-,--compile reduce-overhead}" timeout "${TOTAL:-200}" \
  bash benchmarks/real_clients/run_device.sh "$@"
runs=$(ls -d rc/*/ 2>/dev/null | sed 's:/$::' | grep -v '_compile')
python3 benchmarks/real_clients/summarize.py $runs > "$OUT/summary.md" 2>&1
tar czf "$OUT/runs.tgz" --exclude='*.ncu-rep' rc/*/run.json rc/*/summary.json rc/*.tail.txt 2>/dev/null
