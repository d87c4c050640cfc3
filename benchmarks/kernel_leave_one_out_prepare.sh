#!/usr/bin/env bash
# Prepares, on the CPU host, what benchmarks/kernel_leave_one_out_gpu.sh needs on the GPU host, in one git-ignored
# folder (default .kloo, carried to the device; ~30 MB, under the 64 MiB carry limit):
#   .kloo/lk.git         a bare clone of the Liger-Kernel 0.8.5 checkout (`liger-bot target fetch`) with one branch
#                        per regenerated kernel (`liger-bot/kernel-loo_<op>`, each made by the real CLI from a fresh
#                        main, --force) and `liger-bot/kernel-loo-all`: every kernel side by side with Liger's own
#                        test files swapped to them (test_<op>__<kernel>.py) and a conftest keeping each one's -k
#   .kloo/results.json   per kernel: its case, branch, tier, CPU gates, and Liger's own test on the CPU under
#                        TRITON_INTERPRET=1 (summary, failures); refused references with their reason
#   .kloo/swapped/       each swapped test file and its CPU pytest log; .kloo/prepare/ each CLI run's log
#   .kloo/wheels         liger-bot's wheel (built from this tree) and the wheels the GPU image lacks (libcst, Jinja2,
#                        MarkupSafe, PyYAML, ruff; cp312 manylinux x86_64)
#
#   PYTHONPATH=. bash benchmarks/kernel_leave_one_out_prepare.sh [.kloo] [CASE ...]   # ~15-20 min on two cores
#   ... [CASE ...] --skip-tests: generate only (Liger's tests swapped in, run on the GPU only); 6 cases ~3 min
# then the device call in benchmarks/kernel_leave_one_out_gpu.sh's header.
set -euo pipefail
DEST=${1:-.kloo}
shift || true
PY=${PYTHON:-python3}
LIGER_BOT=${LIGER_BOT:-liger-bot}
WORK=${WORK:-$(mktemp -d)/kloo}
rm -rf "$DEST"
mkdir -p "$DEST/wheels"
"$PY" -m benchmarks.kernel_leave_one_out prepare "$WORK" "$@" --liger-bot "$LIGER_BOT"
git clone -q --bare "$WORK/work/lk" "$DEST/lk.git"
git -C "$DEST/lk.git" gc -q --prune=now
cp "$WORK/results.json" "$DEST/"
cp -r "$WORK/swapped" "$WORK/prepare" "$DEST/"
find "$DEST/prepare" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +  # PR bodies: the logs say it all

"$PY" -m pip wheel -q --no-deps --no-build-isolation . -w "$DEST/wheels"
rm -rf build  # setuptools' build folder
"$PY" -m pip download -q --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST/wheels" libcst==1.9.0 Jinja2==3.1.6 MarkupSafe==3.0.4 PyYAML==6.0.4 ruff==0.14.11
git -C "$DEST/lk.git" branch --list 'liger-bot/*'
for path in "$DEST/lk.git" "$DEST/wheels" "$DEST"; do du -sh "$path"; done
