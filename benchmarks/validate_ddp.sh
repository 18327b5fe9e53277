#!/usr/bin/env bash
# GPU validation of multi-GPU profiling (issue 9) on one host with two GPUs: a single-GPU
# baseline of examples/ddp.py, the 2-rank DDP run, the same with rank 1 delayed by 20 ms per
# step (the straggler roofscope must flag), and merges of both DDP jobs against the baseline
# (scaling tax). Runs stay in /tmp/rs-ddp; their small files, logs and key figures go to $1.
set -u
out=${1:?usage: validate_ddp.sh OUTDIR}
mkdir -p "$out"
# NVLink multicast (NVLS, symmetric memory) stays off on the lent machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
runs=/tmp/rs-ddp
rm -rf "$runs" && mkdir -p "$runs"
steps=30
sched=(--wait 5 --warmup 3 --active 10)
# 6 x (Linear 4096x4096 + bias) + Linear 4096x1: 100,691,969 parameters; 6 * params * 8192 rows.
flops=$(python -c "print(6 * (6 * (4096 * 4096 + 4096) + 4097) * 8192)")

status() { echo "$1: exit $2" | tee -a "$out/status.txt"; }
keep() {  # a Run's or a job's small files; traces stay on the machine
  mkdir -p "$out/$1"
  for f in run.json summary.json job.json report.html; do [ -f "$2/$f" ] && cp "$2/$f" "$out/$1/"; done
  for d in "$2"/rank-*; do [ -d "$d" ] && keep "$1/$(basename "$d")" "$d"; done
  return 0
}
profile() {  # name, launcher words..., then `--` and the example's arguments
  name=$1; shift
  launcher=()
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  shift
  start=$SECONDS
  "${launcher[@]}" -m roofscope run -o "$runs/$name" "${sched[@]}" \
    --model-flops-per-step "$flops" examples/ddp.py --steps "$steps" "$@" >"$out/$name.log" 2>&1
  status "$name" $?
  echo "$name: $((SECONDS - start)) s wall" >>"$out/status.txt"
  keep "$name" "$runs/$name"
}

nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader >"$out/gpu.txt"
nvidia-smi topo -m >"$out/topo.txt" 2>&1
torchrun=(python -m torch.distributed.run --standalone --nproc-per-node 2)
profile baseline python --
profile ddp2 "${torchrun[@]}" --
profile ddp2_delay "${torchrun[@]}" -- --delay-rank 1 --delay-ms 20
for job in ddp2 ddp2_delay; do
  python -m roofscope merge "$runs/$job" --baseline "$runs/baseline" -o "$runs/${job}_vs_baseline" \
    >"$out/${job}_vs_baseline.log" 2>&1
  status "${job}_vs_baseline" $?
  keep "${job}_vs_baseline" "$runs/${job}_vs_baseline"
done

# Key figures: per-rank step/self/exposed-communication time, stragglers, scaling tax.
python - "$runs" >"$out/figures.md" 2>&1 <<'EOF'
import json, sys
from pathlib import Path

runs = Path(sys.argv[1])
ms = lambda x: "-" if x is None else f"{1e3 * x:.2f}"
base = json.loads((runs / "baseline" / "summary.json").read_text())
print(f"baseline (1 GPU): median step {ms(base.get('metrics', {}).get('step_time_s'))} ms")
for job in ("ddp2", "ddp2_delay"):
    s = json.loads((runs / f"{job}_vs_baseline" / "summary.json").read_text())
    print(f"\n## {job}: median step {ms(s['step_time_s'])} ms over {s['ranks_given']} of {s['world_size']} ranks")
    print("| rank | step ms | self ms | comm ms | exposed comm ms | MFU |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in s["per_rank"]:
        mfu = "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
        print(f"| {r['rank']} | {ms(r.get('step_s'))} | {ms(r.get('self_s'))} | {ms(r.get('comm_s'))}"
              f" | {ms(r.get('comm_exposed_s'))} | {mfu} |")
    for st in s["stragglers"]:
        print(f"straggler: rank {st['rank']}, +{ms(st['excess_s'])} ms/step own work"
              f" (noise {ms(s['straggler_noise_s'])} ms)")
    if not s["stragglers"]:
        print(f"no straggler (noise {ms(s['straggler_noise_s'])} ms)")
    if s.get("scaling"):
        print("scaling:", json.dumps(s["scaling"]))
    for f in s["findings"][:3]:
        print("finding:", f.get("rule"), "-", f.get("title"))
EOF
cat "$out/figures.md"
