#!/usr/bin/env bash
# Liger's four text convergence files for every model on liger-bot/convergence-all, in ONE pytest run (needs a GPU).
#   benchmarks/convergence_gpu.sh DIR [MODEL ...]
# DIR is what benchmarks/prepare_convergence.sh wrote: DIR/liger-kernel.git (cloned here into a work tree, on
# liger-bot/convergence-all) and DIR/models.txt (the models, unless given); or DIR is itself a Liger-Kernel
# checkout with that branch. Offline: HF_DATASETS_OFFLINE=1 (the tests read test/resources from the tree); the
# target's sources come from PYTHONPATH=src, so transformers, datasets and triton must be installed, liger-kernel
# need not be. JUnit XML goes to $OUT (default: DIR). Exit status: pytest's.
set -uo pipefail
dir=$(cd "${1:?usage: convergence_gpu.sh DIR [MODEL ...]}" && pwd)
shift
branch=liger-bot/convergence-all
out=${OUT:-$dir}
if [ $# -gt 0 ]; then models=("$@"); else mapfile -t models < "$dir/models.txt"; fi
if [ -d "$dir/liger-kernel.git" ]; then
  work=${WORK:-$(mktemp -d)}/liger-kernel
  git clone -q -b "$branch" "$dir/liger-kernel.git" "$work" || exit 1
else
  work=$dir
  git -C "$work" checkout -q "$branch" || exit 1
fi
expr=$(printf 'mini_%s or ' "${models[@]}"); expr=${expr% or }
echo "models: ${models[*]}"
echo "checkout: $work ($(git -C "$work" log --oneline -1))"
cd "$work"
HF_DATASETS_OFFLINE=1 PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest \
  test/convergence/bf16/test_mini_models.py test/convergence/bf16/test_mini_models_with_logits.py \
  test/convergence/fp32/test_mini_models.py test/convergence/fp32/test_mini_models_with_logits.py \
  -k "$expr" -p no:cacheprovider -rA -q --junitxml="$out/convergence.xml"
