#!/bin/bash
# ResNet-50 fp32 NCHW beside the same loop channels_last (fp32 NHWC), on one GPU: a Run of each at batch 16
# and 64 (their traces come back, to read which kernels the layout replaces and at what bandwidth), then plain
# runs of the two alternated (the script's own timer, no roofscope), then the GPU tests with what time is left.
#   bash benchmarks/real_clients/device_layout.sh      (OUT: layout_runs.tgz, layout_*.txt, gpu_tests.txt);
#   ROUNDS=0 TOTAL_S=0: the Runs alone
set -u
cd "$(dirname "$0")/../.."
. benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
S=benchmarks/real_clients/resnet50_channels_last.py
start=$(date +%s)
for b in ${BATCHES:-16 64}; do
  for v in nchw nhwc; do
    flags="--plain"; [ $v = nhwc ] && flags="--plain --channels-last"
    timeout 120 python3 -m roofscope run -o "rc/${v}_$b" --force -q --no-report --nvml-hz 0 $S $flags \
      --steps 14 --batch "$b" > "$OUT/layout_run_${v}_$b.txt" 2>&1
    echo "run ${v}_$b rc=$?" >> "$OUT/layout_runs.txt"
  done
done
# one archive: a call brings back at most 8 files
(cd rc && tar czf "$OUT/layout_runs.tgz" */run.json */trace.json.gz)
echo "runs $(( $(date +%s) - start ))s" >> "$OUT/layout_runs.txt"
[ "${ROUNDS:-3}" -gt 0 ] && TIMER="own steady step [0-9.]* ms" timeout 150 bash benchmarks/real_clients/cpu/plain_pairs.sh python3 \
  "$S --plain --steps 40 --batch 64" "${ROUNDS:-3}" "--channels-last" > "$OUT/layout_plain.txt" 2>&1
left=$(( ${TOTAL_S:-570} - ($(date +%s) - start) ))
echo "tests get ${left}s" >> "$OUT/layout_runs.txt"
[ "$left" -gt 60 ] && timeout "$left" python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests 2>&1 | tail -25 \
  > "$OUT/gpu_tests.txt"
exit 0
