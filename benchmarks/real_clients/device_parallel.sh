#!/bin/bash
# One device call on nvidia-h200-x4: four chains at once, one GPU each, each in its own copy of the tree
# (the client scripts write rc/ and out/ where they run). Each chain's console and a tarball of its Runs'
# small files come back in $OUT (two files a chain: the call returns at most eight).
#   chain 0: roofscope verify of a ResNet-50 fp32 training loop's top fixes (issue 37)
#   chain 1: verify of GPT-2 generate()'s top fix, then the hand-written decode loop (issue 38)
#   chain 2: the advice clients and their checks (issue 37; advice_check.py), kernels above their roof (issue 39)
#   chain 3: the GPU test suite (one GPU: the two-GPU tests skip)
set -u
cd "$(dirname "$0")/../.."
final=${OUT:-out}; mkdir -p "$final"; final=$(cd "$final" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
src=$PWD
. benchmarks/real_clients/device_env.sh   # the wheels installed once, before the chains share /tmp/site
chain() {  # GPU, name, commands...
  local gpu=$1 name=$2; shift 2
  local dir="/tmp/c${gpu//,/_}"
  rm -rf "$dir" && cp -r "$src" "$dir"
  ( cd "$dir" && export CUDA_VISIBLE_DEVICES=$gpu OUT=$dir/out && mkdir -p out rc \
      && { for cmd in "$@"; do echo "### $cmd"; timeout "${CHAIN_LIMIT:-520}" bash -c "$cmd"; echo "### rc=$?"; done; } \
      > "$final/$name.txt" 2>&1
    tar czf "$final/$name.tgz" out rc/*.txt rc/*/run.json rc/*/summary.json rc/*/verify.json 2>/dev/null ) &
}
V="python3 -m roofscope"
verify_one() {  # name, script args...
  local name=$1; shift
  echo "$V run -o rc/$name --force -q --no-report benchmarks/real_clients/$* > rc/$name.run.txt 2>&1; tail -3 rc/$name.run.txt; \
python3 benchmarks/real_clients/show_findings.py rc/$name; \
$V verify rc/$name --top 3 --yes --force --pairs \${PAIRS:-3} --min-pairs 2 --steps 15 --budget-s \${BUDGET:-150} --run-timeout-s 200"
}
if [ "${SET:-1}" = 1 ]; then
  chain 0 verify_resnet ". benchmarks/real_clients/device_env.sh; $(verify_one resnet_plain resnet50_channels_last.py --plain --steps 60)"
  chain 1 verify_gpt2 ". benchmarks/real_clients/device_env.sh; $(verify_one gpt2_generate gpt2_generate.py)" \
    "bash benchmarks/real_clients/device_decode_loop.sh"
  chain 2 advice "LIMIT=\${ALIMIT:-70} bash benchmarks/real_clients/device_advice.sh" \
    ". benchmarks/real_clients/device_env.sh; for r in rc/*/; do python3 benchmarks/real_clients/show_findings.py \${r%/} --roof; done"
  chain 3 gpu_suite ". benchmarks/real_clients/device_env.sh; python3 -m pytest -q -m gpu -p no:cacheprovider tests/ --timeout 300 2>&1 | tail -30"
elif [ "$SET" = one ]; then   # one GPU (nvidia-h200): the suite on the final code, then verify ResNet's two CPU-free fixes
  chain 0 single ". benchmarks/real_clients/device_env.sh; python3 -m pytest -q -m gpu -p no:cacheprovider tests/ --timeout 200 2>&1 | tail -30" \
    "PAIRS=3 BUDGET=120; . benchmarks/real_clients/device_env.sh; $(verify_one resnet_plain resnet50_channels_last.py --plain --steps 60 | sed 's/--top 3/--fix channels_last --fix compile/')"
else   # SET=2: the suite again on the final code, the two-GPU job (GPUs 1 and 2), verify with more pairs
  chain 0 gpu_suite ". benchmarks/real_clients/device_env.sh; python3 -m pytest -q -m gpu -p no:cacheprovider tests/ --timeout 300 2>&1 | tail -30"
  chain 1,2 ddp "bash benchmarks/real_clients/device_ddp_straggler.sh \${STALL:-25} 2"
  chain 3 verify "PAIRS=4 BUDGET=200; . benchmarks/real_clients/device_env.sh; $(verify_one resnet_plain resnet50_channels_last.py --plain --steps 60 | sed 's/--top 3/--fix channels_last --fix compile/')" \
    ". benchmarks/real_clients/device_env.sh; $(verify_one gpt2_generate gpt2_generate.py)"
fi
wait
ls -la "$final"
