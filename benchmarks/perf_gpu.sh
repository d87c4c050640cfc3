#!/usr/bin/env bash
# The perf pipeline's one GPU run, through the shipped path: liger-bot installed from its wheel, then, each on a fresh
# clone of the carried checkout, `liger-bot perf KERNEL` on the runs ONLY names (default: layer_norm_fwd poly_norm_fwd,
# the forwards the ninth session's run left with the headroom):
#   layer_norm_fwd  Liger's layer_norm, forward at 4096x16384 (0.77x torch.compile measured; the row in registers)
#   poly_norm_fwd   Liger's poly_norm, forward at 4096x16384 (0.55x; three block reductions over a register row)
#               both try the catalogue's forward variants (the looped forward, 2048 then 4096 columns a chunk); the
#               backward entries are skipped for a forward target and cost nothing
#   layer_norm  Liger's, backward at 4096x16384 (0.93x torch.compile measured; the dW partials over one program per SM)
#   poly_norm   Liger's, backward at 4096x16384 (the same one-program-per-SM row loop, three rstd per row)
#   softmax     Liger's, full pass at 4096x16384 (one program per row; calculate_settings' warps, never swept)
#   rms_norm, llama_rms_norm  Liger's RMSNorm (full at 16384x16384) and the generated one (`liger-bot kernel
#               test/transformers/test_rms_norm.py:LlamaRMSNorm` run here, then perf on its branch), measured before:
#               only when named, e.g. ONLY="rms_norm llama_rms_norm"
# a table per kernel (every size and pass, before / after / torch.compile; the generated RMSNorm beside Liger's
# LigerRMSNorm where both ran) and the wall time per kernel.
#
# Here (CPU host):   bash benchmarks/perf_gpu_prepare.sh .perf
# Device (one call): run(command="OUT=$OUT bash benchmarks/perf_gpu.sh .perf", carry=[".perf"], timeout_s=450)
#
# Limits of the default run (worst case, every step killed at its limit): install ~15 s, layer_norm_fwd 185 s (no
# variant starts after 100 s: baseline ~35 s, launch sweep + v1 ~45 s, the first looped variant ~50 s, final gate
# ~35 s; each variant child and the final gate now also run the numeric gate against v0 at all 5 sizes, ~5-10 s),
# poly_norm_fwd 185 s (100 s): ~385 s, ~340 s expected. The tenth session's budget of 150 s (limit 230) took 410 s
# without the numeric gate; with it, a third variant starting just before 150 s would overrun the 230 s limit.
# FWD_BUDGET / FWD_LIMIT override both (e.g. FWD_BUDGET=150 FWD_LIMIT=250: ~520 s worst case).
# The backward runs, by name (ONLY="layer_norm poly_norm softmax"): layer_norm 175 s (no variant starts after 80 s), poly_norm 175 s (80 s), softmax 165 s (70 s): ~530 s. Past runs overran their budget by 30-55 s
# (the last variant, then the final gate), so the limits leave the final gate ~40 s. The kernel's tests run on 8
# pytest-xdist workers (--test-workers), the whole file in the final gate (softmax's variants skip its 17 GB
# large-row-offset case, its final gate runs it). With ONLY="rms_norm llama_rms_norm": rms_norm 160 s (50 s),
# generating llama_rms_norm 100 s, its perf 140 s (45 s). The workspaces (variants, notes, child JSON, PR bodies)
# land in $OUT. Each point is timed from a CUDA graph where capture works, else with do_bench (the table's "timing",
# before / after); a point whose baseline is launch-bound is shown but never rejects a variant ("judged").
set -uo pipefail
PERF=${1:-.perf}
OUT=${OUT:-out/perf-gpu}
mkdir -p "$OUT"
SITE=/tmp/liger-bot-site
started=$(date +%s)

uname -m
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"
python3 -m pip install -q --no-deps --no-index --target "$SITE" "$PERF"/wheels/*.whl || exit 1
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
LB="$SITE/bin/liger-bot"
"$LB" --help >/dev/null || exit 1
echo "installed liger-bot from $(ls "$PERF"/wheels/liger_bot-*.whl) in $(( $(date +%s) - started )) s"

run_kernel() {  # name limit_s args...   (NAME_fwd: the kernel NAME, its own clone and workspace)
  local name=$1 limit=$2
  local kernel=${name%_fwd}
  shift 2
  if [ -z "${REUSE:-}" ]; then  # REUSE=1: the checkout is already there (a generated kernel's branch)
    rm -rf "/tmp/lk-$name"
    git clone -q "$PERF/lk" "/tmp/lk-$name"
  fi
  local t0=$(date +%s)
  timeout "$limit" "$LB" perf "$kernel" --repo "/tmp/lk-$name" --out "$OUT/$name" --json "$@" \
    >"$OUT/$name.json" 2>"$OUT/$name.log"
  local rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - t0 )) s"
  tail -n 25 "$OUT/$name.log"
  git -C "/tmp/lk-$name" log --oneline -3 --all
  git -C "/tmp/lk-$name" diff --stat main..HEAD 2>/dev/null | tail -2
}

WORKERS=(--test-workers 8 --no-ncu --no-script)
SELECTED=" ${ONLY:-layer_norm_fwd poly_norm_fwd} "
wanted() { [[ "$SELECTED" == *" $1 "* ]]; }

# the forwards: FWD_BUDGET s before no variant starts, FWD_LIMIT s in all (defaults: 100 / 185, see the header)
FWD=(--pass forward --size 4096x16384 --budget-s "${FWD_BUDGET:-100}" "${WORKERS[@]}")
wanted layer_norm_fwd && run_kernel layer_norm_fwd "${FWD_LIMIT:-185}" "${FWD[@]}"
wanted poly_norm_fwd && run_kernel poly_norm_fwd "${FWD_LIMIT:-185}" "${FWD[@]}"

wanted layer_norm && run_kernel layer_norm 175 --pass backward --size 4096x16384 --budget-s 80 "${WORKERS[@]}"
wanted poly_norm && run_kernel poly_norm 175 --pass backward --size 4096x16384 --budget-s 80 "${WORKERS[@]}"
wanted softmax && run_kernel softmax 165 --pass full --size 4096x16384 --tests-k "not large_row_offset" \
  --budget-s 70 "${WORKERS[@]}"
wanted rms_norm && run_kernel rms_norm 160 --pass full --size 16384x16384 --tests-k "not dtensor" \
  --final-tests-k "not dtensor" --budget-s 50 "${WORKERS[@]}"

# the generated RMSNorm: written by the installed CLI on a fresh clone, then perf on the branch it left
if wanted llama_rms_norm; then
  rm -rf /tmp/lk-llama_rms_norm /tmp/lk-llama_rms_norm.liger-bot
  git clone -q "$PERF/lk" /tmp/lk-llama_rms_norm
  t0=$(date +%s)
  timeout 100 "$LB" kernel test/transformers/test_rms_norm.py:LlamaRMSNorm --repo /tmp/lk-llama_rms_norm --force \
    --out "$OUT/kernel-llama_rms_norm" >"$OUT/kernel-llama_rms_norm.log" 2>&1
  echo "kernel llama_rms_norm: exit $? in $(( $(date +%s) - t0 )) s"
  tail -n 12 "$OUT/kernel-llama_rms_norm.log"
  git -C /tmp/lk-llama_rms_norm checkout -q liger-bot/kernel-llama_rms_norm && \
    REUSE=1 run_kernel llama_rms_norm 140 --pass full --size 16384x16384 --budget-s 45 "${WORKERS[@]}"
fi

AGAINST=()  # the generated RMSNorm beside Liger's, when both ran
wanted rms_norm && wanted llama_rms_norm && AGAINST=(--against llama_rms_norm=rms_norm)
read -ra KERNELS <<<"$SELECTED"
python3 -m benchmarks.perf_tables "$OUT" "${KERNELS[@]}" "${AGAINST[@]}"
echo "total $(( $(date +%s) - started )) s"
