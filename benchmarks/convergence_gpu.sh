#!/usr/bin/env bash
# Run Liger's convergence tests for every liger-bot/autopatch-* branch of a Liger-Kernel checkout (needs a GPU).
#   benchmarks/convergence_gpu.sh CHECKOUT [MODEL ...]
# CHECKOUT holds the branches made by benchmarks/autopatch_new_models.py (e.g. out/new-models-*/liger-kernel).
# Each branch is checked out in turn (they all start from the same base commit), its four text convergence files
# are run with -k mini_<model>, and the original branch is checked out again. Needs liger-kernel's test deps
# (pip install -e '.[dev]' in the checkout, which brings `datasets`). Exit status: number of failing branches.
set -uo pipefail
checkout=${1:?usage: convergence_gpu.sh CHECKOUT [MODEL ...]}
shift
cd "$checkout"
original=$(git rev-parse --abbrev-ref HEAD)
if [ $# -gt 0 ]; then models=("$@"); else
  mapfile -t models < <(git for-each-ref --format='%(refname:short)' refs/heads/liger-bot/ | sed 's#liger-bot/autopatch-##')
fi
failed=0
for model in "${models[@]}"; do
  git checkout -q "liger-bot/autopatch-$model" || { failed=$((failed + 1)); continue; }
  for file in test/convergence/bf16/test_mini_models.py test/convergence/bf16/test_mini_models_with_logits.py \
              test/convergence/fp32/test_mini_models.py test/convergence/fp32/test_mini_models_with_logits.py; do
    echo "=== $model $file"
    PYTHONPATH=src python -m pytest "$file" -k "mini_$model" -q -p no:cacheprovider 2>&1 | tail -3
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed=$((failed + 1))
  done
done
git checkout -q "$original"
echo "failing runs: $failed"
exit "$failed"
