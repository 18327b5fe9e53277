#!/bin/bash
# Device call for HF generate's launch-bound-decode fix (docs/validation.md): the GEMM clock/data probe,
# then examples/generate.py under `roofscope run` eager and with the fix the report gives
# (--static-compile: a static cache, generate() compiles the decode step into CUDA graphs).
set -u
. "$(dirname "$0")/device_env.sh"
timeout 90 python3 benchmarks/real_clients/gemm_clock_probe.py > "$OUT/gemm_probe.txt" 2>&1
mkdir -p rc
for v in "" "--static-compile"; do
  name=generate${v:+_static}
  start=$(date +%s)
  timeout "${LIMIT:-220}" python3 -m roofscope run -o "rc/$name" --force examples/generate.py $v > "rc/$name.txt" 2>&1
  echo "$name rc=$? $(( $(date +%s) - start ))s" | tee -a "$OUT/log.txt"
  tail -80 "rc/$name.txt" > "$OUT/$name.tail.txt"
done
tar czf "$OUT/generate_runs.tgz" rc/generate*
