#!/usr/bin/env bash
# GPU validation of the collectors (issue 3): roofscope run on the GPT and decode examples,
# the profiling-overhead and NVML-cost benchmarks. Writes logs and Run metadata under $1.
set -u
out=${1:?usage: validate_collectors.sh OUTDIR}
mkdir -p "$out"
keep() {  # the small files of a Run; traces stay on the machine
  mkdir -p "$out/$1" && cp "$2"/run.json "$2"/summary.json "$out/$1/" 2>/dev/null
}
run() {  # name, then roofscope run arguments
  name=$1; shift
  /usr/bin/time -f "%e s wall" python -m roofscope run -o "/tmp/rs-$name" --force "$@" >"$out/$name.log" 2>&1
  echo "$name: exit $?" | tee -a "$out/status.txt"
  keep "$name" "/tmp/rs-$name"
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >"$out/gpu.txt"
run gpt_modules --modules --tokens-per-step 32768 --model-flops-per-step 41231686041600 examples/gpt.py --steps 8
run gpt --tokens-per-step 32768 --model-flops-per-step 41231686041600 examples/gpt.py --steps 8
run gpt_compiled --tokens-per-step 32768 --model-flops-per-step 41231686041600 examples/gpt.py --steps 8 --compile
run decode_b1 --active 8 examples/decode.py --batch 1
run decode_b64 --active 8 examples/decode.py --batch 64
python benchmarks/bench_overhead.py --steps 12 >"$out/overhead.md" 2>"$out/overhead.err"
python benchmarks/bench_nvml.py >"$out/nvml.md" 2>&1
