#!/bin/bash
# Validation on a GPU machine (docs/validation.md): measure the ceilings, then run each client
# under `roofscope run` with no extra flags, and again with its fix applied (--compile), and
# optionally with --counters ncu. One tarball per client lands in $OUT as soon as it exists.
#   benchmarks/real_clients/run_device.sh hf_trainer_llama lightning_cnn ...   # baseline + --compile
#   NCU=1 SAMPLE=400 benchmarks/real_clients/run_device.sh resnet50_channels_last   # --counters ncu only
#   NCU=1 SAMPLE=621 SKIP=620 ...   # the launches after the first 620 (ncu --launch-skip)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}; mkdir -p "$OUT" rc
RS="python3 -m roofscope"
if [ -z "${NCU:-}" ] && [ -z "${NO_MICROBENCH:-}" ]; then
  ( time timeout 120 $RS microbench --quick ) > "$OUT/microbench.txt" 2>&1
fi
for c in "$@"; do
  variants=("" "--compile"); [ -n "${NCU:-}" ] && variants=("ncu")
  [ -n "${VARIANTS:-}" ] && IFS=, read -r -a variants <<< "$VARIANTS"   # e.g. VARIANTS="--compile reduce-overhead"
  for v in "${variants[@]}"; do
    name=$c${v:+_$(echo "${v#--}" | tr ' ' '_')}
    flags=(); [ "$v" = ncu ] && flags=(--counters ncu --counters-sample "${SAMPLE:-400}" --counters-skip "${SKIP:-0}")
    extra=(); [ "${v:0:9}" = --compile ] && read -r -a extra <<< "$v"
    start=$(date +%s)
    timeout "${LIMIT:-240}" $RS run -o "rc/$name" --force "${flags[@]}" "benchmarks/real_clients/$c.py" "${extra[@]}" \
      > "rc/$name.txt" 2>&1
    echo "$name rc=$? $(( $(date +%s) - start ))s" | tee -a "$OUT/log.txt"
    tail -60 "rc/$name.txt" > "rc/$name.tail.txt"
  done
  tar czf "$OUT/$c${NCU:+_ncu}${VARIANTS:+_v}.tgz" --exclude="*.ncu-rep" rc/$c* 2>>"$OUT/log.txt"
done
