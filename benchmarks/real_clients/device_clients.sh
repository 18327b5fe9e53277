#!/bin/bash
# Real clients under `roofscope run` with no flags (the opening step-less window runs in every one):
# each must exit 0 with a Run of its steps, not of a window. Then one compiled (--compile) client.
# A line per client in $OUT/clients.txt: exit code, what the trace is, the warnings about windows.
set -u
cd "$(dirname "$0")/../.."
. benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
NO_MICROBENCH=1 VARIANTS="," LIMIT=150 bash benchmarks/real_clients/run_device.sh ${CLIENTS:-hf_bert_trainer lightning_cnn timm_vit accelerate_loop torchvision_detection} > /dev/null 2>&1
NO_MICROBENCH=1 VARIANTS="--compile" LIMIT=200 bash benchmarks/real_clients/run_device.sh lightning_cnn > /dev/null 2>&1
for d in rc/*/; do
  d=${d%/}; [ -f "$d/run.json" ] || { echo "$d: no Run"; continue; }
  python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]; m = json.load(open(f"{d}/run.json")); s = m.get("steps", {})
w = [x for x in m.get("warnings", []) if "window" in x or "outside roofscope" in x]
print(f"{d}: exit {m.get('exit_status')}, source {s.get('source')}, boundaries {s.get('boundaries_seen')},"
      f" recorded {s.get('recorded')}, stepless_window {s.get('stepless_window')},"
      f" loop {(s.get('loop') or {}).get('text')}; {w[:1]}")
PY
done | tee "$OUT/clients.txt"
cat "$OUT/log.txt" | tee -a "$OUT/clients.txt"
