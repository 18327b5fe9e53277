#!/bin/bash
# Issue 37's clients under `roofscope run` (no flags), then advice_check.py on their summaries: what the
# advice says for each, and PASS/FAIL for what must hold (docs/diagnosis.md). Ceilings measured first
# (microbench --quick), so the memory-bound rules run. CLIENTS picks a subset; LIMIT bounds each client.
#   bash benchmarks/real_clients/device_advice.sh                       # all seven, ~8 min on an H200
#   CLIENTS="lora_accum unet_attention llama_decode_loop" bash benchmarks/real_clients/device_advice.sh
set -u
cd "$(dirname "$0")/../.."
. benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
VARIANTS="," LIMIT=${LIMIT:-120} bash benchmarks/real_clients/run_device.sh \
  ${CLIENTS:-lora_accum unet_attention llama_decode_loop gpt2_generate hf_bert_trainer torchvision_detection triton_loop} \
  > /dev/null 2>&1
python3 benchmarks/real_clients/advice_check.py rc | tee "$OUT/advice.txt"
