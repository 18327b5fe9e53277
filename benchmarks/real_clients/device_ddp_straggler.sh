#!/usr/bin/env bash
# Issue 42 on two GPUs (nvidia-h200-x2): the job's own step and the straggler's saving against plain runs.
# Plain torchrun runs of ddp_encoder.py, balanced and with rank 1 stalling STALL ms per step, alternated
# PAIRS times (the script's own timer), then one roofscope run of each; the job lines and summary.json's
# figures go to $OUT. Usage: device_ddp_straggler.sh [STALL_MS] [PAIRS]; DDP_ARGS (e.g. --share-gpu) go to
# the client.
set -u
stall=${1:-25}; pairs=${2:-2}
out=${OUT:-/tmp/ddp-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
client=benchmarks/real_clients/ddp_encoder.py
tr() { python3 -m torch.distributed.run --standalone --nproc-per-node 2 "$@"; }
for i in $(seq "$pairs"); do
  for v in balanced stall; do
    extra=(${DDP_ARGS:-}); [ "$v" = stall ] && extra+=(--stall-rank 1 --stall-ms "$stall")
    tr "$client" "${extra[@]}" 2>&1 | grep ddp_encoder | sed "s/^/plain $v pair $i: /" | tee -a "$out/plain.txt"
  done
done
for v in balanced stall; do
  extra=(${DDP_ARGS:-}); [ "$v" = stall ] && extra+=(--stall-rank 1 --stall-ms "$stall")
  tr -m roofscope run -o "/tmp/rs-$v" --force "$client" "${extra[@]}" >"$out/roofscope-$v.log" 2>&1
  echo "roofscope $v: exit $?" | tee -a "$out/plain.txt"
  grep -E "ddp_encoder|roofscope job|straggler|^ +[01] " "$out/roofscope-$v.log" | sed "s/^/roofscope $v: /"
  cp "/tmp/rs-$v/summary.json" "$out/summary-$v.json" 2>/dev/null
  python3 - "$out/summary-$v.json" "$v" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"roofscope {sys.argv[2]}: job step {s['step_time_s']*1e3:.2f} ms ({s['step_time_source']}),"
      f" profiled {s['profiled_step_time_s']*1e3:.2f}; stragglers",
      [(x["rank"], round(x["excess_s"]*1e3, 2), round(x["saving_s"]*1e3, 2), x["basis"]) for x in s["stragglers"]])
PY
done
