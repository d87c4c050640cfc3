#!/usr/bin/env bash
# One device call (eleventh session): gemma4_unified_text's GPU whole-model failure, diagnosed through the shipped path.
#   run(command="OUT=$OUT bash benchmarks/gemma4_unified_gpu.sh .conv10", carry=[".whl", ".conv10"])
# 1. liger-bot verify on its branch (autopatch_gpu.py), which now runs the fixed debug after the whole-model gate;
# 2. liger-bot debug --json on it, and on Liger's own hand-written gemma4_text patch in the same checkout (a control:
#    does the whole-model check pass a patch Liger's maintainers wrote for the same family?);
# 3. Liger's own four convergence files for the model, whatever the gate said.
set -uo pipefail
DIR=${1:?usage: gemma4_unified_gpu.sh DIR}
OUT=${OUT:-out/g4u}
mkdir -p "$OUT"
WORK=/tmp/liger-bot-gpu OUT=$OUT bash benchmarks/autopatch_gpu.sh "$DIR" --models gemma4_unified_text --deadline 200
export PYTHONPATH=/tmp/liger-bot-site PATH="/tmp/liger-bot-site/bin:$PATH" HF_DATASETS_OFFLINE=1
clone=/tmp/liger-bot-gpu/gemma4_unified_text
for model in gemma4_unified_text gemma4_text; do
  s=$(date +%s)
  timeout 150 liger-bot debug "$model" --repo "$clone" --json > "$OUT/debug-$model.json" 2> "$OUT/debug-$model.err"
  echo "debug $model: exit $? in $(( $(date +%s) - s )) s"; tail -c 600 "$OUT/debug-$model.err"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ('whole_model','flags','first_diverging')}, indent=1)[:3000])" "$OUT/debug-$model.json" || true
done
cd "$clone" && s=$(date +%s)
PYTHONPATH="src:$PYTHONPATH" timeout 240 python3 -m pytest -q -n 4 -p no:cacheprovider -k mini_gemma4_unified_text \
  test/convergence/bf16/test_mini_models.py test/convergence/bf16/test_mini_models_with_logits.py \
  test/convergence/fp32/test_mini_models.py test/convergence/fp32/test_mini_models_with_logits.py 2>&1 | tail -25
echo "Liger's convergence files: $(( $(date +%s) - s )) s"
