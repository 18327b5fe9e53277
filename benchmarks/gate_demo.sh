#!/usr/bin/env bash
# The CI regression gate on a GPU (docs/gate.md): profile examples/mlp.py three times, write a
# baseline from the first Run, then gate an unchanged rerun (must pass: exit 0) and a run
# slowed by --extra-elementwise N extra elementwise ops per step (must fail: exit 1).
# Prints each verdict; keeps the baseline, logs and verdicts (JSON, JUnit, markdown) in OUTDIR.
#
#   benchmarks/gate_demo.sh OUTDIR [EXTRA_OPS]        # default EXTRA_OPS: 20
set -u
out=${1:?usage: gate_demo.sh OUTDIR [EXTRA_OPS]}
extra=${2:-20}
mkdir -p "$out"
runs=${RUNS_DIR:-/tmp/roofscope-gate-demo}
# fp32 matmuls on TF32 tensor cores; 8192x2048 activations make each extra elementwise op a
# real memory-bound kernel (64 MiB read + 64 MiB written), not just a launch.
script_args=(examples/mlp.py --steps 16 --batch 8192 --width 2048 --layers 4 --tf32)

profile() {  # name, then extra script arguments
  name=$1; shift
  python -m roofscope run -o "$runs/$name" --force --wait 2 --warmup 2 --active 10 -q "${script_args[@]}" "$@" \
    >"$out/run-$name.log" 2>&1
  echo "roofscope run $name: exit $?"
}

gate() {  # name, expected exit code
  echo; echo "=== roofscope gate $1 --baseline baseline.json (expect exit $2) ==="
  python -m roofscope gate "$runs/$1" --baseline "$out/baseline.json" --force \
    --json "$out/gate-$1.json" --junit "$out/gate-$1.xml" --markdown "$out/gate-$1.md"
  code=$?
  echo "exit code: $code (expected $2)"
  [ "$code" -eq "$2" ] || status=1
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
profile base
profile rerun
profile slow --extra-elementwise "$extra"
python -m roofscope gate --write-baseline "$runs/base" "$out/baseline.json" --force
status=0
gate rerun 0
gate slow 1
echo; [ "$status" -eq 0 ] && echo "gate demo: as expected" || echo "gate demo: UNEXPECTED exit codes"
exit "$status"
