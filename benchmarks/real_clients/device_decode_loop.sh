#!/bin/bash
# Issue 38 on the GPU: a hand-written decode loop over a transformers Llama's model.forward
# (hf_decode_loop.py, random init from a config, no download), eager and with
# model.forward = torch.compile(model.forward, mode="reduce-overhead"): plain (the script's own per-token
# timer), then under `roofscope run` with no flags. Proves it: steps.source "loop" on the token loop
# (`for t in range(args.new_tokens)`) named with its round loop, the profiled (active) steps in round 1 or
# later, the unprofiled median within 10% of the script's own steady figure, round 0 a cold stretch apart.
set -u
cd "$(dirname "$0")/../.."
. benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
show() {
  python3 - "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/run.json")); s = m["steps"]; st = json.load(open(sys.argv[1] + "/summary.json"))["step_time"]
loop = s.get("loop") or {}
active = sorted({o for o, p in zip(m["step_times"].get("outer") or [], m["step_times"]["phase"]) if p == "active"})
print({k: s.get(k) for k in ("source", "step_on", "boundaries_seen", "recorded", "rearmed")})
print("loop:", loop.get("text"), "line", loop.get("line"), "| outer:", [o["text"] for o in loop.get("outer", [])],
      "| why:", loop.get("why"))
print(f"roofscope unprofiled {st['unprofiled_median_s'] * 1e3:.3f} ms/token ({st['source']} clock, {st['unprofiled_steps']} steps),"
      f" profiled {st['profiled_median_s'] * 1e3:.3f} ({st['inflation']:.2f}x, outer {st.get('inflation_outer')}),"
      f" active steps in rounds {active}, cold stretches {st.get('cold_stretches')}")
for w in m.get("warnings", []):
    print("  warning:", w[:300])
PY
}
{
for v in "" "--compile"; do
  name=decode_loop${v:+_compiled}
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$RANDOM timeout 240 python3 benchmarks/real_clients/hf_decode_loop.py $v \
    | sed "s/^/plain $name: /"
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$RANDOM timeout 300 python3 -m roofscope run -o rc/$name --force --no-report \
    benchmarks/real_clients/hf_decode_loop.py $v > rc/$name.txt 2>&1
  echo "== $name rc=$?"; grep -h "own steady\|^round" rc/$name.txt
  if [ -f rc/$name/run.json ]; then show rc/$name; else tail -8 rc/$name.txt; fi
done
} 2>&1 | tee "$OUT/decode_loop.txt"
