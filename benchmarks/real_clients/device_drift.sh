#!/bin/bash
# Where does the drift between plain runs of one program come from on the device host? The same client
# run plain N times, alternated: free (the scheduler's choice of cores) and pinned to a fixed set of cores
# (taskset), its own steady step printed per run; the host's topology and clocks beside them.
#   N=6 PIN=0-3 CLIENT="lora_accum.py --steps 24" bash benchmarks/real_clients/device_drift.sh
set -u
cd "$(dirname "$0")/../.."
. benchmarks/real_clients/device_env.sh
mkdir -p "$OUT"
{
  nproc; lscpu | grep -E "NUMA|Model name|MHz|Thread|Socket"; nvidia-smi topo -m 2>/dev/null | head -5
  cat /sys/fs/cgroup/cpu.max 2>/dev/null; uptime
  read -r -a client <<< "${CLIENT:-lora_accum.py --steps 24}"
  for i in $(seq "${N:-6}"); do
    for mode in free pinned; do
      pre=(); [ $mode = pinned ] && pre=(taskset -c "${PIN:-0-3}")
      start=$(date +%s.%N)
      step=$("${pre[@]}" python3 "benchmarks/real_clients/${client[0]}" "${client[@]:1}" 2>&1 | grep "own steady" | awk '{print $4}')
      echo "$i $mode $step ms  ($(echo "$(date +%s.%N) - $start" | bc | cut -c1-5) s, load $(cut -d' ' -f1 /proc/loadavg))"
    done
  done
} 2>&1 | tee "$OUT/drift.txt"
