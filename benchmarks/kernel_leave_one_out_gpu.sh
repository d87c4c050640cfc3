#!/usr/bin/env bash
# The kernel leave-one-out's GPU run, through the shipped path: liger-bot installed from its wheel into a --target
# site dir, then (benchmarks/kernel_leave_one_out_gpu.py) per regenerated kernel `liger-bot verify --pipeline kernel`
# on its own branch (checkstyle, the generated tests on the GPU, the benchmark gate), Liger's OWN unit tests for each
# op swapped to the generated kernel (`pytest -n 8` over the combined branch), and the timing table: generated vs
# Liger's hand-written kernel vs eager vs torch.compile of the reference (forward, backward, full, peak memory) over
# the token sizes of Liger's benchmark script for the op.
#
# Here (CPU host):   PYTHONPATH=. bash benchmarks/kernel_leave_one_out_prepare.sh .kloo
#   (or only some kernels, Liger's tests not run on the CPU: ... prepare.sh .kloo CASE ... --skip-tests, ~3 min)
# Device (one call): run(command="OUT=$OUT bash benchmarks/kernel_leave_one_out_gpu.sh .kloo", carry=[".kloo"],
#                        timeout_s=450)
# Dry run here:      OUT=/tmp/kloo-out PYTHON=.venv/bin/python WHEELS='.kloo/wheels/liger_bot-*' \
#                      bash benchmarks/kernel_leave_one_out_gpu.sh .kloo --cases loo_relu_squared --parallel 1
#
# Budgets (seconds from this script's start; the whole call ends by ~400 s): install <= 60; verifies side by side
# (--parallel 6) with Liger's own tests and a torch.compile warm-up beside them, all stopped at 20 + 150 s; then the
# timing, size by size over every kernel, until 380 s; the last writes by 395 s. A kernel that fails or hangs is
# killed at its phase's limit and recorded; the others go on. In $OUT, rewritten as results come (4 files):
# table.md, summary.json, timing.json, runs.tar.gz (verify reports and logs, Liger's test log, the timing log).
set -uo pipefail
DEST=${1:-.kloo}
shift || true
OUT=${OUT:-out/kloo-gpu}
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/liger-bot-kloo-site}
STARTED=$(date +%s)
export STARTED
mkdir -p "$OUT"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"
# a CPU host's dry run with its own Python (not 3.12) takes only liger-bot's: WHEELS='.kloo/wheels/liger_bot-*'
# shellcheck disable=SC2086  # the glob
timeout 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  ${WHEELS:-$DEST/wheels/*.whl} || exit 1
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
liger-bot --help >/dev/null || exit 1
echo "installed $(ls "$DEST"/wheels/liger_bot-*.whl) in $(( $(date +%s) - STARTED )) s; liger-bot is $(command -v liger-bot)"
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the .py imports benchmarks.gpu_run
PYTHONPATH="$ROOT:$PYTHONPATH" timeout -s KILL 405 "$PY" -m benchmarks.kernel_leave_one_out_gpu "$DEST" "$OUT" \
  --deadline 395 --verify-s 150 "$@"
echo "exit $? total $(( $(date +%s) - STARTED )) s"
ls -la "$OUT"
