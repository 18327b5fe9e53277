#!/usr/bin/env bash
# Plain runs of a client (no roofscope), its baseline and each variant once per round, the order reversed every
# other round, timed by the script's own timer (its "median step|token X ms" line, or the regular expression in
# TIMER, e.g. TIMER="own later TPOT [0-9.]* ms" for the GPU clients); then each variant's saving
# pair by pair (baseline less variant), mean and 95% interval (Student's t). What docs/validation.md's "plain
# runs" columns for the CPU clients are.
#
#   benchmarks/real_clients/cpu/plain_pairs.sh PYTHON "SCRIPT [ARGS]" ROUNDS "VARIANT ARGS" ["VARIANT ARGS" ...]
#   e.g. plain_pairs.sh .venv/bin/python "benchmarks/real_clients/cpu/lightning_cpu_cnn.py" 5 --compile --channels-last
set -euo pipefail
py=$1; script=$2; rounds=$3; shift 3
out=$(mktemp)
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then order=(base "$@"); else order=("$@" base); fi
    for v in "${order[@]}"; do
        args=""; [ "$v" = base ] || args=$v
        # shellcheck disable=SC2086  # the script's and the variant's arguments split into words
        ms=$($py -W ignore $script $args 2>&1 | grep -o "${TIMER:-median [a-z]* [0-9.]* ms}" | tail -1 \
            | grep -o "[0-9][0-9.]*" | tail -1 || true)
        echo "round $r [$v] ${ms:-failed}" | tee -a "$out"
    done
done
python3 - "$out" <<'PY'
import math, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    head, _, rest = line.partition("[")
    variant, _, ms = rest.rpartition("] ")
    if ms.strip() != "failed":
        runs.setdefault(head.split()[1], {})[variant] = float(ms)
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
for variant in sorted({v for r in runs.values() for v in r} - {"base"}):
    d = [r["base"] - r[variant] for r in runs.values() if "base" in r and variant in r]
    if len(d) < 2:
        print(f"{variant}: {len(d)} pair(s), too few for an interval")
        continue
    m, half = statistics.mean(d), T95.get(len(d) - 1, 2.0) * statistics.stdev(d) / math.sqrt(len(d))
    print(f"{variant}: saves {m:.2f} ms [{m - half:.2f}, {m + half:.2f}] over {len(d)} pairs:"
          f" {', '.join(f'{x:.1f}' for x in d)}")
PY
rm -f "$out"
