#!/bin/bash
# `roofscope verify` on a GPU (issue 37): each client recorded once with `roofscope run`, then its fixes
# re-run in the program, alternated with plain runs (docs/verify.md). Clients and fixes:
#   resnet_plain   resnet50_channels_last.py --plain: a fp32 NCHW ResNet-50 training loop;
#                  tf32, channels_last, cudnn_benchmark, compile
#   gpt2_generate  gpt2_generate.py: HF generate(), eager dynamic cache; static_cache
# Each verify prints its plan and cost first, one line per run, then the verdicts; verify.json and the
# re-rendered summary.json of every Run land in $OUT/verify_runs.tgz, the console in $OUT/verify.txt.
#   benchmarks/real_clients/device_verify.sh                          # both clients (about 10 device-minutes)
#   CLIENTS=gpt2_generate benchmarks/real_clients/device_verify.sh    # one
#   BUDGET=120 PAIRS=2 benchmarks/real_clients/device_verify.sh       # cheaper: 2 rounds, 120 s of runs each
set -u
cd "$(dirname "$0")/../.."
source benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
declare -A SCRIPT=([resnet_plain]="resnet50_channels_last.py --plain --steps 60" [gpt2_generate]="gpt2_generate.py")
declare -A FIXES=([resnet_plain]="tf32 channels_last cudnn_benchmark compile" [gpt2_generate]="static_cache")
for c in ${CLIENTS:-resnet_plain gpt2_generate}; do
  read -r -a script <<< "${SCRIPT[$c]}"
  start=$(date +%s)
  timeout "${LIMIT:-300}" python3 -m roofscope run -o "rc/$c" --force -q --no-report \
    "benchmarks/real_clients/${script[0]}" "${script[@]:1}" > "rc/$c.run.txt" 2>&1
  echo "== $c: roofscope run rc=$? $(( $(date +%s) - start ))s" | tee -a "$OUT/verify.txt"
  # What the Run's top recommendations ask for (fix.apply, or the fix derived from the rule), beside the named ones.
  python3 - "rc/$c" <<'PY' | tee -a "$OUT/verify.txt"
import json, sys
from roofscope.fixes import derive
s = json.load(open(sys.argv[1] + "/summary.json"))
for f in s.get("findings", [])[:5]:
    fix = f.get("fix") or {}
    spec = fix["apply"] if "apply" in fix else derive(f["rule"], f.get("change", ""))
    print(f"  finding {f['rank']}: {f['rule']} -{f['saving_s'] * 1e3:.3f} ms/step -> fix {spec or '(source edit)'!r}")
PY
  args=(); for f in ${FIXES[$c]}; do args+=(--fix "$f"); done
  start=$(date +%s)
  timeout "${VLIMIT:-540}" python3 -m roofscope verify "rc/$c" "${args[@]}" --yes --force --pairs "${PAIRS:-4}" \
    --min-pairs 2 --steps 20 --budget-s "${BUDGET:-240}" --run-timeout-s 240 2>&1 | tee -a "$OUT/verify.txt"
  echo "== $c: roofscope verify rc=${PIPESTATUS[0]} $(( $(date +%s) - start ))s" | tee -a "$OUT/verify.txt"
done
tar czf "$OUT/verify_runs.tgz" rc/*/verify.json rc/*/summary.json rc/*/run.json rc/*.run.txt 2>>"$OUT/verify.txt"
