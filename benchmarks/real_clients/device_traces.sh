#!/bin/bash
# The clients' Runs with their traces, to cost and diagnose again off the device: each under `roofscope run`
# with no flag; $OUT/<client>.tgz holds the Run directory (trace included) and its console.
#   CLIENTS="lora_accum hf_bert_trainer" bash benchmarks/real_clients/device_traces.sh
set -u
cd "$(dirname "$0")/../.."
. benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
. benchmarks/real_clients/client_scripts.sh
for c in ${CLIENTS:?name the clients}; do
  read -r -a script <<< "${SCRIPT[$c]}"
  start=$(date +%s)
  timeout "${RUN_LIMIT:-90}" python3 -m roofscope run -o "rc/$c" --force -q --no-report \
    "benchmarks/real_clients/${script[0]}" "${script[@]:1}" > "rc/$c.run.txt" 2>&1
  echo "== $c: roofscope run rc=$? $(( $(date +%s) - start ))s"
  tar czf "$OUT/$c.tgz" "rc/$c.run.txt" "rc/$c"
done
