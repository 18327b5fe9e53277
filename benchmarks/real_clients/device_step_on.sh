#!/bin/bash
# --step-on __main__.FUNC on the GPU (issue 26): the user's Triton kernel script under `roofscope run`
# with no flags (the step-less hint should name scaled_add), then with the --step-on it names; the GPU
# tests of the feature; then own-time pairs (plain, roofscope, alternating) of GPT-2 generate() and BERT.
set -u
cd "$(dirname "$0")/../.."
. benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
{
timeout 120 python3 -m roofscope run -o rc/triton --force --no-report benchmarks/real_clients/triton_user_kernel.py \
  > rc/triton.txt 2>&1
echo "== no flags rc=$?"; grep -h "warning" rc/triton.txt | head -3
timeout 120 python3 -m roofscope run -o rc/triton_step --force --no-report --step-on __main__.scaled_add \
  benchmarks/real_clients/triton_user_kernel.py > rc/triton_step.txt 2>&1
echo "== --step-on __main__.scaled_add rc=$?"; grep -h "warning" rc/triton_step.txt | head -3
python3 - rc/triton_step <<'PY'
import json, sys, roofscope
print(json.load(open(sys.argv[1] + "/run.json"))["steps"])
k = roofscope.analyze(sys.argv[1]).kernels; k = k[k["cat"] == "kernel"]
print(f"kernels {len(k)}, the user's {k['name'].astype(str).str.contains('scaled_add').sum()}, GPU {k['dur_s'].sum()*1e3:.2f} ms")
PY
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_step_on_script.py tests/test_stepless.py 2>&1 | tail -5
} 2>&1 | tee "$OUT/step_on.txt"
MODES="${MODES:-plain roofscope plain roofscope plain roofscope}" LIMIT=100 \
  bash benchmarks/real_clients/device_own_time.sh ${CLIENTS:-hf_bert_trainer gpt2_generate} > /dev/null 2>&1
grep -E "^==|^own steady|own time" "$OUT/own_time.txt" | tee -a "$OUT/step_on.txt"
