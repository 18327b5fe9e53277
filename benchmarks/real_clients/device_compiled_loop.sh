#!/bin/bash
# A program that compiles and marks no step (issue 26): compiled_loop.py under `roofscope run` with no flags,
# cold Inductor caches, REPS times; then Lightning's CNN --compile (an optimizer: its steps must stay the
# optimizer's) and the compiled GPT example, cold, once each; then the GPU tests of the feature.
set -u
cd "$(dirname "$0")/../.."
. benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
show() {  # the Run's steps and the warning that says what was stepped on
  python3 - "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/run.json")); s = m["steps"]
print({k: s.get(k) for k in ("source", "step_on", "boundaries_seen", "recorded", "stepless_window")})
for w in m.get("warnings", []):
    if "compiles" in w or "step boundar" in w: print("  warning:", w[:300])
PY
}
{
for r in $(seq "${REPS:-2}"); do
  d=rc/compiled_loop_$r
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$RANDOM timeout 240 python3 -m roofscope run -o $d --force --no-report \
    benchmarks/real_clients/compiled_loop.py > $d.txt 2>&1
  echo "== compiled_loop cold #$r rc=$?"; grep -h "^first call" $d.txt; [ -f $d/run.json ] && show $d
  [ -f $d/run.json ] || tail -5 $d.txt
done
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$RANDOM timeout 240 python3 benchmarks/real_clients/compiled_loop.py | sed 's/^/plain: /'
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$RANDOM timeout 240 python3 -m roofscope run -o rc/lcnn --force --no-report \
  benchmarks/real_clients/lightning_cnn.py --compile > rc/lcnn.txt 2>&1
echo "== lightning_cnn --compile cold rc=$?"; [ -f rc/lcnn/run.json ] && show rc/lcnn
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$RANDOM timeout 200 python3 -m roofscope run -o rc/gptc --force --no-report \
  --settle 0 examples/gpt.py --steps 8 --compile > rc/gptc.txt 2>&1
echo "== gpt --compile cold rc=$?"; [ -f rc/gptc/run.json ] && show rc/gptc
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_step_on_script.py tests/test_stepless.py \
  tests/test_compile_aware.py 2>&1 | tail -3
} 2>&1 | tee "$OUT/compiled_loop.txt"
