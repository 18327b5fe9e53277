#!/bin/bash
# Issue 28's device check: the GPU test suite on the staged analysis, then clients nobody here wrote,
# run unmodified under `roofscope run`; each Run is re-analyzed by `roofscope analyze` (which must
# import no torch) and the re-analysis must give the summary.json the run wrote.
set -u
. "$(dirname "$0")/device_env.sh"
mkdir -p "$OUT" rc
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, transformers, torchvision; print(torch.__version__, transformers.__version__, torchvision.__version__)" >> "$OUT/gpu.txt" 2>&1
timeout "${TESTS_S:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -40 > "$OUT/pytest_gpu.txt"
for c in ${CLIENTS:-gpt2_generate hf_bert_trainer torchvision_detection triton_user_kernel}; do
  start=$(date +%s)
  timeout "${LIMIT:-150}" python3 -m roofscope run -o "rc/$c" --force "benchmarks/real_clients/$c.py" > "rc/$c.txt" 2>&1
  echo "$c run rc=$? $(( $(date +%s) - start ))s report=$(test -s rc/$c/report.html && echo yes || echo no)" >> "$OUT/log.txt"
  PYTHONPROFILEIMPORTTIME=1 python3 -m roofscope analyze "rc/$c" -q --json "rc/$c.again.json" 2> "rc/$c.imports.txt"
  echo "$c analyze rc=$? torch_imported=$(grep -c '| torch$' rc/$c.imports.txt)" >> "$OUT/log.txt"
  python3 - "$c" >> "$OUT/log.txt" 2>&1 <<'PY'
import json, sys
c = sys.argv[1]
stored = json.load(open(f"rc/{c}/summary.json"))
again = json.load(open(f"rc/{c}.again.json"))["summary"]
stored.pop("analysis_version", None)
diff = sorted(k for k in set(stored) | set(again) if stored.get(k) != again.get(k))
print(c, "re-analysis equal" if not diff else f"re-analysis differs in {diff}")
PY
  tail -45 "rc/$c.txt" > "$OUT/$c.tail.txt"
done
tar czf "$OUT/runs.tgz" rc/*/summary.json rc/*/run.json 2>/dev/null
