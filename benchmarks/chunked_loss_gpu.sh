#!/usr/bin/env bash
# The chunked-loss pipeline's GPU run, through the shipped path: liger-bot installed from its wheel, then
# `liger-bot verify --pipeline chunked-loss` on a fresh clone of every generated loss's branch (side by side), a solo
# benchmark per loss beside Liger's own class (leave-one-out losses), and one table: each gate, peak memory and time
# of the chunked loss against the unfused reference (and Liger's class), hidden 4096, vocab 128256, 8 x 1,024, bf16.
#
# Here (CPU host):   bash benchmarks/chunked_loss_gpu_prepare.sh .chunked
# Device (one call): run(command="OUT=$OUT/chunked bash benchmarks/chunked_loss_gpu.sh .chunked",
#                        carry=[".chunked"], timeout_s=360)
# Dry run here:      OUT=/tmp/cl-out PYTHON=.venv/bin/python WHEELS='.chunked/wheels/liger_bot-*' \
#                      bash benchmarks/chunked_loss_gpu.sh .chunked   (the GPU gates SKIP: no CUDA device)
#
# Budgets keep it near 300 s: each verify is killed at 230 s, no solo benchmark starts with under 45 s left of the
# 285 s deadline. Extra arguments go to benchmarks/chunked_loss_gpu.py (--losses, --parallel, --timeout, --deadline).
# Everything lands in $OUT as three files (a device call brings back 8 files, 2 folders down): table.md,
# summary.json (every row: gates, figures, log tails) and runs.tar.gz (each loss's report, benchmark, logs).
set -uo pipefail
DEST=${1:-.chunked}
shift || true
OUT=${OUT:-out/chunked-loss-gpu}
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/liger-bot-chunked-site}
started=$(date +%s)
mkdir -p "$OUT"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"
# a CPU host's dry run with its own Python (not 3.12) takes only liger-bot's: WHEELS='.chunked/wheels/liger_bot-*'
# shellcheck disable=SC2086  # the glob
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  ${WHEELS:-$DEST/wheels/*.whl} || exit 1
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
liger-bot --help >/dev/null || exit 1
echo "installed $(ls "$DEST"/wheels/liger_bot-*.whl) in $(( $(date +%s) - started )) s; liger-bot is $(command -v liger-bot)"
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the .py imports benchmarks.gpu_run
PYTHONPATH="$ROOT:$PYTHONPATH" "$PY" -m benchmarks.chunked_loss_gpu "$DEST" "$OUT" "$@"
echo "total $(( $(date +%s) - started )) s"
