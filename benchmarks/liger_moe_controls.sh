#!/usr/bin/env bash
# Liger's own enabled MoE entries of the four convergence files, on the unmodified 0.8.5 checkout (controls for the
# generated MoE entries, run beside them in the same device call, with the verify gate's environment).
#   OUT=... bash benchmarks/liger_moe_controls.sh BARE_REPO WORKERS MODEL ...
set -uo pipefail
bare=${1:?usage: liger_moe_controls.sh BARE_REPO WORKERS MODEL ...}; workers=$2; shift 2
work=$(mktemp -d)/liger-kernel
git -c core.hooksPath=/dev/null clone -q -b main "$bare" "$work" || exit 1
expr=$(printf 'mini_%s- or ' "$@"); expr=${expr% or }
cd "$work" && started=$(date +%s)
HF_DATASETS_OFFLINE=1 LIGER_FUSED_MOE_AUTOTUNE=0 PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest \
  test/convergence/bf16/test_mini_models.py test/convergence/bf16/test_mini_models_with_logits.py \
  test/convergence/fp32/test_mini_models.py test/convergence/fp32/test_mini_models_with_logits.py \
  -k "$expr" -n "$workers" -p no:cacheprovider -q -rfE --junitxml="$OUT/controls.xml" > "$OUT/controls.log" 2>&1
echo "controls ($*): pytest exit $? in $(( $(date +%s) - started )) s"
grep -E "passed|failed" "$OUT/controls.log" | tail -1
grep -E "^(FAILED|ERROR)" "$OUT/controls.log" | cut -c1-220
