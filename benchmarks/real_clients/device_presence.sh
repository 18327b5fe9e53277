#!/bin/bash
# What roofscope leaves in the program outside the profiled window (issue 25): GPT-2 generate()
# plain and under `roofscope run`, alternating REPS times; rounds 2.. come after the profile.
set -u
cd "$(dirname "$0")/../.."
source benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
for r in $(seq "${REPS:-3}"); do
  p=$(python3 benchmarks/real_clients/gpt2_generate.py 2>&1 | grep "^own later")
  q=$(python3 -m roofscope run -q --no-report -o rc/presence --force benchmarks/real_clients/gpt2_generate.py 2>&1 | grep "^own later")
  echo "rep $r plain: $p | roofscope run: $q" | tee -a "$OUT/presence.txt"
done
