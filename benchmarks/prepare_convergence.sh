#!/usr/bin/env bash
# Prepare the GPU convergence run on this CPU host (see benchmarks/prepare_convergence.py for the steps):
#   benchmarks/prepare_convergence.sh OUTDIR [MODEL ...]
# OUTDIR ends up small (< 20 MB): liger-kernel.git (a bare clone holding liger-bot/convergence-all and every
# liger-bot/autopatch-<model> branch), models.txt, cpu-checks.json. Then on the GPU host:
#   benchmarks/convergence_gpu.sh OUTDIR
set -euo pipefail
outdir=${1:?usage: prepare_convergence.sh OUTDIR [MODEL ...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$here/.venv/bin/python}
[ -x "$python" ] || python=python3
cd "$here"
exec "$python" -m benchmarks.prepare_convergence "$outdir" "$@"
