#!/bin/bash
# The program's own time for steps on the script's own function (issue 26), on the CPU (host-bound):
# cpu_function_loop.py plain and under `roofscope run`, alternating REPS times, for --step-on __main__.step
# and for the step roofscope adopts in a compiling program (--compile). Per run: the script's own
# median step, and for roofscope's runs its unprofiled median step, the step source and the boundaries.
set -u
cd "$(dirname "$0")/../.."
client=benchmarks/real_clients/cpu_function_loop.py
out=${TMPDIR:-/tmp}/roofscope-cpu-own-time
for variant in "--step-on __main__.step|" "|--compile"; do
  IFS='|' read -r rs_flags args <<< "$variant"
  for r in $(seq "${REPS:-3}"); do
    echo "plain $args: $(python3 $client $args | grep '^own steady')"
    own=$(python3 -m roofscope run -q --no-report -o "$out" --force --peak-tflops 1 --peak-bandwidth 10 $rs_flags \
          $client $args 2>/dev/null | grep '^own steady')
    echo "roofscope $rs_flags $args: $own | $(python3 - "$out" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))["step_time"]; m = json.load(open(sys.argv[1] + "/run.json"))["steps"]
print(f"roofscope unprofiled {s['unprofiled_median_s'] * 1e3:.3f} ms ({s['source']} clock, {s['unprofiled_steps']} steps),"
      f" profiled {s['profiled_median_s'] * 1e3:.3f}; steps on {m['source']} {m['step_on']}, {m['boundaries_seen']} boundaries")
PY
)"
  done
done
