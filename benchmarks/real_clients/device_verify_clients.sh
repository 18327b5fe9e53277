#!/bin/bash
# Issue 37's clients on one GPU, one after another (no two programs share the GPU while timed): each under
# `roofscope run` with no flag, its findings as verify will read them, then `roofscope verify` of its top
# fixes (or the FIX_<client> list), alternated with plain runs of the program. Per client, its console
# lands in $OUT/<client>.txt and its Run's small files in $OUT/<client>.tgz.
#   CLIENTS="gpt2_generate lora_accum" bash benchmarks/real_clients/device_verify_clients.sh
#   GPU_TESTS="tests/test_gpu.py" CLIENTS=unet_attention bash benchmarks/real_clients/device_verify_clients.sh
set -u
cd "$(dirname "$0")/../.."
. benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
V="python3 -m roofscope"
. benchmarks/real_clients/client_scripts.sh
# verify's arguments per client: what it tries, and how long it may take (the call's 600 s bound them).
declare -A VERIFY=(
  [gpt2_generate]="--top 1 --pairs 2 --steps 10 --budget-s 70"
  [lora_accum]="--top 3 --pairs 3 --steps 8 --budget-s 150"
  [unet_attention]="--top 3 --pairs 3 --steps 15 --budget-s 150"
  [hf_bert_trainer]="--top 3 --pairs 3 --steps 10 --budget-s 150"
  [torchvision_detection]="--top 3 --pairs 2 --steps 6 --budget-s 150"
  [resnet_plain]="--fix channels_last --pairs 2 --steps 15 --budget-s 60"
  [timm_cnn]="--top 3 --pairs 2 --steps 8 --budget-s 240"
  [timm_convnext]="--top 3 --pairs 2 --steps 8 --budget-s 200"
)
if [ -n "${GPU_TESTS:-}" ]; then
  timeout "${TEST_LIMIT:-200}" python3 -m pytest -q -m gpu -p no:cacheprovider $GPU_TESTS 2>&1 | tail -15 \
    | tee "$OUT/gpu_tests.txt"
fi
for c in ${CLIENTS:?name the clients}; do
  read -r -a script <<< "${SCRIPT[$c]}"
  read -r -a args <<< "${VERIFY[$c]}"
  extra=(); var="FIX_$c"; [ -n "${!var:-}" ] && IFS=, read -r -a fixes <<< "${!var}" \
    && { args=(--pairs "${PAIRS:-2}" --steps 8 --budget-s "${BUDGET:-200}"); for f in "${fixes[@]}"; do extra+=(--fix "$f"); done; }
  {
    start=$(date +%s)
    timeout "${RUN_LIMIT:-150}" $V run -o "rc/$c" --force -q --no-report "benchmarks/real_clients/${script[0]}" \
      "${script[@]:1}" > "rc/$c.run.txt" 2>&1
    echo "== $c: roofscope run rc=$? $(( $(date +%s) - start ))s"; tail -4 "rc/$c.run.txt"
    python3 benchmarks/real_clients/show_findings.py "rc/$c"
    start=$(date +%s)
    timeout "${VERIFY_LIMIT:-420}" $V verify "rc/$c" "${args[@]}" "${extra[@]}" --min-pairs "${MIN_PAIRS:-2}" --yes --force \
      --run-timeout-s "${RUN_TIMEOUT:-150}" 2>&1
    echo "== $c: roofscope verify rc=$? $(( $(date +%s) - start ))s"
  } > "$OUT/$c.txt" 2>&1
  # KEEP_TRACE=1: the Run's trace too, to cost its kernels again off the device.
  tar czf "$OUT/$c.tgz" rc/$c.run.txt rc/$c/summary.json rc/$c/run.json rc/$c/verify.json \
    ${KEEP_TRACE:+rc/$c/*.json.gz} 2>/dev/null
done
