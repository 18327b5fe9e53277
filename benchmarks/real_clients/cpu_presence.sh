#!/bin/bash
# The presence cost of the loop tracking (collectors/loops/) on a host-bound CPU loop: cpu_loop_presence.py
# under `roofscope run` with no flags (its loop is the step: the tracking's marks or sys.monitoring events,
# and the boundaries) against the same script marking its steps with roofscope.step() (--explicit: the same
# boundaries, the tracker let go), and plain, alternating, REPS times. Each figure is the script's own median
# step over the second half of its loop, long after the profile.
set -u
cd "$(dirname "$0")/../.."
client=benchmarks/real_clients/cpu_loop_presence.py
out=${TMPDIR:-/tmp}/roofscope-cpu-presence
steps=${STEPS:-20000}
rs() { python3 -m roofscope run -q --no-report -o "$out" --force --peak-tflops 1 --peak-bandwidth 10 "$@" 2>/dev/null; }
for r in $(seq "${REPS:-5}"); do
  a=$(rs $client --steps "$steps" | grep '^own steady' | awk '{print $4}')
  b=$(rs $client --steps "$steps" --explicit | grep '^own steady' | awk '{print $4}')
  c=$(python3 $client --steps "$steps" | awk '{print $4}')
  echo "pair $r: loop steps $a us, roofscope.step() $b us, plain $c us; loop/explicit $(python3 -c "print(f'{$a / $b:.3f}')")"
done
