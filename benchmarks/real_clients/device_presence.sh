#!/bin/bash
# What roofscope leaves in the program outside the profiled window (issues 25, 26): GPT-2 generate()
# plain and under `roofscope run`, alternating REPS times; rounds 2.. come after the profile.
# VARIANTS picks what alternates (default "plain roofscope"): plain (no roofscope), roofscope (no flags),
# teardown (roofscope with TEARDOWN_CUPTI=1 set by the user: CUPTI detached at every stop),
# nonvml (roofscope --nvml-hz 0: no sampler thread), stepforward (--step-on forward: no loop watch). Each line: the script's own "own later" figure.
set -u
cd "$(dirname "$0")/../.."
source benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
# The per-round median TPOTs after round 0, then the script's "own later" figure.
rounds() { awk '/^round [1-9]/ {for (i = 1; i < NF; i++) if ($i == "median") printf "%s ", $(i + 1)} /^own later/ {print "| " $0}'; }
client=benchmarks/real_clients/${CLIENT:-gpt2_generate}.py
for r in $(seq "${REPS:-3}"); do
  for v in ${VARIANTS:-plain roofscope}; do
    case $v in
      plain) line=$(python3 "$client" 2>&1 | rounds) ;;
      roofscope) line=$(python3 -m roofscope run -q --no-report -o rc/presence --force "$client" 2>&1 | rounds) ;;
      teardown) line=$(TEARDOWN_CUPTI=1 python3 -m roofscope run -q --no-report -o rc/presence --force "$client" 2>&1 \
                       | rounds) ;;
      nonvml) line=$(python3 -m roofscope run -q --no-report -o rc/presence --force --nvml-hz 0 "$client" 2>&1 \
                     | rounds) ;;
      stepforward) line=$(python3 -m roofscope run -q --no-report -o rc/presence --force --step-on forward "$client" \
                          2>&1 | rounds) ;;
    esac
    echo "rep $r $v: $line" | tee -a "$OUT/presence.txt"
  done
done
