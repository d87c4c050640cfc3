#!/usr/bin/env bash
# One device call of the autopatch GPU run, through the shipped path: liger-bot and the wheels the image lacks
# installed from .whl (as the verify workflow installs them), then benchmarks/autopatch_gpu.py on DIR's branches.
#
# Here (CPU host):   benchmarks/prepare_convergence.sh DIR MODEL ...   and   pip wheel --no-deps . -w .whl
# Device (one call): run(command="OUT=$OUT bash benchmarks/autopatch_gpu.sh DIR --parallel 5 --deadline 500",
#                        carry=[".whl", "DIR"])
# Extra arguments go to autopatch_gpu.py (--models, --parallel, --deadline, --kernel-repo/--kernel).
set -uo pipefail
DIR=${1:?usage: autopatch_gpu.sh DIR [autopatch_gpu.py args]}
shift
OUT=${OUT:-out/autopatch-gpu}
SITE=/tmp/liger-bot-site
started=$(date +%s)
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
  || exit 1
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH" HF_DATASETS_OFFLINE=1
python3 -c "import sys, torch, triton, transformers; print(sys.version.split()[0], torch.__version__, \
triton.__version__, transformers.__version__, torch.cuda.get_device_name())"
echo "installed $(ls .whl/liger_bot-*.whl) in $(( $(date +%s) - started )) s; liger-bot is $(command -v liger-bot)"
python3 benchmarks/autopatch_gpu.py "$DIR" "$OUT" "$@"
echo "call: $(( $(date +%s) - started )) s"
