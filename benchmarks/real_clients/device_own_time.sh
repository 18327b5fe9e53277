#!/bin/bash
# The program's own time against roofscope's (issue 25, docs/validation.md): each client runs plain
# (python3, its own timer) and under `roofscope run` with no flags, back to back on the same GPU.
#   benchmarks/real_clients/device_own_time.sh "gpt2_generate" "gpt2_generate --static" "hf_bert_trainer" ...
# MODES (default "plain roofscope") picks the variants; RSFLAGS adds flags to `roofscope run`, and a
# mode "roofscope:--flag:value" adds its own (MODES="plain roofscope roofscope:--stepless-after:0").
# Each client's own-timer lines and roofscope's summary land in $OUT/own_time.txt; the Runs in $OUT/runs.tgz.
set -u
cd "$(dirname "$0")/../.."
source benchmarks/real_clients/device_env.sh
mkdir -p "$OUT" rc
for spec in "$@"; do
  read -r -a words <<< "$spec"
  c=${words[0]}; rest=("${words[@]:1}")
  name=$c$(printf '_%s' "${rest[@]#--}" | tr -d ' ' | sed 's/_$//')
  for mode in ${MODES:-plain roofscope}; do
    IFS=: read -r -a mw <<< "$mode"
    m=$(printf '%s' "$mode" | tr -c 'a-zA-Z0-9\n' '_')
    start=$(date +%s)
    if [ "$mode" = plain ]; then
      timeout "${LIMIT:-300}" python3 "benchmarks/real_clients/$c.py" "${rest[@]}" > "rc/$name.$m.txt" 2>&1
    else
      timeout "${LIMIT:-300}" python3 -m roofscope run -o "rc/$name" --force ${RSFLAGS:-} "${mw[@]:1}" \
        "benchmarks/real_clients/$c.py" "${rest[@]}" > "rc/$name.$m.txt" 2>&1
    fi
    rc=$?
    echo "== $name [$m] rc=$rc $(( $(date +%s) - start ))s" | tee -a "$OUT/own_time.txt"
    grep -E "^(own |round )" "rc/$name.$m.txt" >> "$OUT/own_time.txt"
    sed -n '/^  own time/,/^$/p;/^Recommendations/,/^Rules not applied/p' "rc/$name.$m.txt" | head -40 >> "$OUT/own_time.txt"
    [ $rc -ne 0 ] && tail -20 "rc/$name.$m.txt" >> "$OUT/own_time.txt"
  done
done
tar czf "$OUT/runs.tgz" --exclude="*.html" --exclude="*.ncu-rep" rc 2>/dev/null
cat "$OUT/own_time.txt"
