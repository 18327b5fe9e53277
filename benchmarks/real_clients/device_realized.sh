#!/bin/bash
# A fix measured as the program sees it (issue 25, docs/validation.md): the client without and with
# the fix roofscope recommends, both plain (no roofscope), alternating REPS times so that drift on
# the machine falls on both alike, then once under `roofscope run` for the prediction.
#   benchmarks/real_clients/device_realized.sh "gpt2_generate|--static" "hf_bert_trainer|--compile reduce-overhead"
set -u
cd "$(dirname "$0")/../.."
source benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
for pair in "$@"; do
  c=${pair%%|*}; fix=${pair#*|}
  read -r -a fixargs <<< "$fix"
  for r in $(seq "${REPS:-3}"); do
    for v in base fix; do
      args=(); [ $v = fix ] && args=("${fixargs[@]}")
      own=$(timeout "${LIMIT:-300}" python3 "benchmarks/real_clients/$c.py" "${args[@]}" 2>&1 | grep "^own steady" | tail -1)
      echo "$c [$v${args:+ ${args[*]}}] rep $r: $own" | tee -a "$OUT/realized.txt"
    done
  done
  if [ -z "${NO_PREDICTION:-}" ]; then
    timeout "${LIMIT:-300}" python3 -m roofscope run -o "rc/$c" --force --no-report "benchmarks/real_clients/$c.py" \
      > "rc/$c.roofscope.txt" 2>&1
    { echo "$c under roofscope run:"; grep "^own steady" "rc/$c.roofscope.txt"
      sed -n '/^  own time/,/^$/p;/^Recommendations/,/^$/p' "rc/$c.roofscope.txt" | head -30
      python3 -c "import json,sys; d=json.load(open('rc/$c/summary.json'))['diagnosis']
for ch in d['changes']: print('  change', ch['change'], round(ch['saving_s']*1e3, 3), 'ms', ch['rules'])" ; } >> "$OUT/realized.txt"
  fi
done
tar czf "$OUT/realized_runs.tgz" rc 2>/dev/null
cat "$OUT/realized.txt"
