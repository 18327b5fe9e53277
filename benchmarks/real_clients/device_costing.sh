#!/bin/bash
# Issue 26 on a GPU: the ceilings measured here, clients nobody here tuned for under `roofscope run`
# (torchvision Faster R-CNN training, a user's Triton kernel with no steps at all), and Runs recorded
# earlier (RUNS_DIR) analyzed again on these ceilings: GPU time without a cost, kernels above their roof.
set -u
cd "$(dirname "$0")/../.."
source benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
timeout 150 python3 -m roofscope microbench ${MB_FLAGS:-} > "$OUT/microbench.txt" 2>&1; tail -3 "$OUT/microbench.txt"
timeout 200 python3 -m roofscope run -o rc/detection --force --no-report benchmarks/real_clients/torchvision_detection.py \
  --steps 20 > rc/detection.txt 2>&1; echo "detection rc=$?"
# A user's Triton kernel with no step: a short script (its opening window) and a 12 s loop (the
# window --stepless-after seconds after the first GPU work replaces the opening one).
timeout 90 python3 -m roofscope run -o rc/triton --force --no-report \
  benchmarks/real_clients/triton_user_kernel.py --steps 50 > rc/triton.txt 2>&1; echo "triton rc=$?"
timeout 90 python3 -m roofscope run -o rc/triton_loop --force --no-report \
  benchmarks/real_clients/triton_loop.py --seconds 12 > rc/triton_loop.txt 2>&1; echo "triton_loop rc=$?"
grep -h "time window" rc/triton.txt rc/triton_loop.txt
for r in rc/detection rc/triton rc/triton_loop ${RUNS_DIR:+$RUNS_DIR/*}; do
  [ -f "$r/run.json" ] || { echo "$r: no Run"; continue; }
  python3 - "$r" <<'PY'
import sys, roofscope
a = roofscope.analyze(sys.argv[1]); s = a.to_dict()
above = s["above_roof"]
print(f"{sys.argv[1]}: uncosted {100 * s['unattributed']['share']:.1f}% of {s['kernel_time_s'] * 1e3:.1f} ms;"
      f" above roof: {above.get('kernels', 0)} kernels; ceilings {s['ceilings']['source']};"
      f" stepless {(s.get('run') or {}).get('steps', {}).get('stepless_window')}")
for f in s["findings"][:4]:
    print(f"   {f['rule']}: {f['saving_s'] * 1e3:.3f} ms {f.get('status', '')} {f['summary'][:150]}")
PY
done
grep -E "^(step|own)" rc/detection.txt | tail -3
tar czf "$OUT/costing_runs.tgz" rc/detection rc/triton rc/triton_loop rc/*.txt 2>/dev/null
