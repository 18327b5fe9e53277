#!/bin/bash
# Step-less scripts and Kineto session switches on the GPU (issue 26): a user's Triton kernel, short
# (the opening window) and 12 s long (the --stepless-after window replaces it), each under `roofscope
# run` with no flags; the compiled GPT example with a cold Inductor cache; GPT-2 generate()'s own
# time plain and under roofscope (CUPTI detached after the profile). Lines to $OUT/stepless.txt.
set -u
cd "$(dirname "$0")/../.."
. benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
{
for spec in "triton_user_kernel.py --steps 50" "triton_loop.py --seconds 12"; do
  read -r -a w <<< "$spec"; name=${w[0]%.py}
  timeout 120 python3 -m roofscope run -o "rc/$name" --force --no-report "benchmarks/real_clients/${w[@]}" \
    > "rc/$name.txt" 2>&1
  echo "== $name rc=$?"; grep -h "time window" "rc/$name.txt" | head -2
  [ -f "rc/$name/run.json" ] && python3 - "rc/$name" <<'PY'
import sys, roofscope
a = roofscope.analyze(sys.argv[1]); k = a.kernels[a.kernels["cat"] == "kernel"]
names = k["name"].astype(str)
print(f"kernels {len(k)}, of them the user's Triton kernel {names.str.contains('scale').sum()},"
      f" GPU time {k['dur_s'].sum() * 1e3:.2f} ms")
PY
done
MODES="default default" bash benchmarks/real_clients/compile_repro.sh
} 2>&1 | tee "$OUT/stepless.txt"
LIMIT=200 bash benchmarks/real_clients/device_own_time.sh gpt2_generate > /dev/null 2>&1
head -40 "$OUT/own_time.txt" | tee -a "$OUT/stepless.txt"
