#!/bin/bash
# The compiled GPT example under `roofscope run`, N times, each with a cold Inductor cache (where the GPU
# suite's run once segfaulted): exit code and, for a crash, faulthandler's stacks. MODES: env settings,
# "default" for none (e.g. "default TEARDOWN_CUPTI=1").
. "$(dirname "$0")/device_env.sh"; mkdir -p "$OUT"
for env in ${MODES:-default default default}; do
  [ "$env" = default ] && e="" || e="$env"
  d=/tmp/cr_$RANDOM
  env $e TORCHINDUCTOR_CACHE_DIR=$d.cache timeout 200 python3 -X faulthandler -m roofscope run -o $d --settle 0 \
    examples/gpt.py --steps 8 --compile > $d.out 2> $d.err
  rc=$?; echo "== $env rc=$rc"
  [ $rc -ne 0 ] && grep -v "^ *$" $d.err | grep -vE "UserWarning|_warn_once|torch.compile\(module\)" | tail -40
done
