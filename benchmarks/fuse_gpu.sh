#!/usr/bin/env bash
# Issue 13's GPU figures in one or two device calls, in the fourteenth session's order, each step under its own limit
# so one slow step cannot cost the rest (every step writes under $OUT as it goes):
#   demo     `liger-bot demo recsys --device cuda` from the installed wheel (the shipped path), ~55 s
#   forms    `liger-bot demo recsys --forms` from the wheel: each variant in its own process, then all of them
#            interleaved in one (the verdict), ~190 s at --steps 50 --rounds 1 --form-limit 45
#   recsys   the fused gather + pool against EmbeddingBag and embedding + our pool at the recsys shapes, ~60 s
#   grid     the partitioned mean's B x L x D x dtype grid (short_correctness skew grid), ~125 s; GRID_ARGS adds
#            options to it, e.g. GRID_ARGS='--b 16384 262144 --lengths 4 16 --d 16 64' (those cells only)
#   grouped  K features in one launch against K single ops and eager EmbeddingBags, ~120 s
#   padded   the padded masked mean and the split form, ~150 s
# STEPS picks the steps (default "demo forms recsys grid": ~430 s, one call); the rest in a second call:
#   run(command="OUT=$OUT bash benchmarks/fuse_gpu.sh", carry=[".whl"], timeout_s=560)
#   run(command="STEPS='grouped padded' OUT=$OUT bash benchmarks/fuse_gpu.sh", carry=[".whl"], timeout_s=400)
# .whl (built here): the liger_bot wheel plus jinja2 and markupsafe for the image's Python:
#   rm -f .whl/liger_bot-*.whl && .venv/bin/pip wheel -q --no-deps --no-build-isolation -w .whl .
#   .venv/bin/pip download -q --no-deps -d .whl jinja2 markupsafe --only-binary=:all: --python-version 3.12 \
#       --platform manylinux2014_x86_64
set -uo pipefail
mkdir -p "${OUT:=out/fuse-gpu}"
OUT=$(cd "$OUT" && pwd)  # absolute: the wheel's steps run from /tmp, away from the checkout
STEPS=${STEPS:-demo forms recsys grid}
SITE=/tmp/liger-bot-fuse
REPO=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" | tee -a "$OUT/gpu.txt"

installed() {
    [ -d "$SITE/bin" ] && return 0
    python3 -m pip install -q --no-deps --no-index --target "$SITE" .whl/liger_bot-*.whl .whl/jinja2-*.whl \
        .whl/markupsafe-*.whl
}

step() {  # step NAME LIMIT COMMAND...: one step, its exit status and wall time on a line of $OUT/steps.txt
    local name=$1 limit=$2
    shift 2
    local start
    start=$(date +%s)
    timeout "$limit" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    local status=$?
    echo "$name exit=$status $(($(date +%s) - start))s (limit ${limit}s)" | tee -a "$OUT/steps.txt"
}

for name in $STEPS; do
    case $name in
    demo)
        installed && (cd /tmp && PYTHONPATH=$SITE step demo 100 "$SITE/bin/liger-bot" demo recsys --device cuda \
            --steps 20 --compile-limit 30)
        tail -12 "$OUT/demo.out"
        ;;
    forms)
        installed && (cd /tmp && PYTHONPATH=$SITE step forms 300 "$SITE/bin/liger-bot" demo recsys --forms \
            --device cuda --steps 50 --rounds 1 --form-limit 45 --json)
        tail -3 "$OUT/forms.err"
        ;;
    recsys)
        PYTHONPATH=$REPO step recsys 150 python3 -m benchmarks.pooling_grid_gpu --out "$OUT/recsys" \
            --sections correctness recsys --budget-s 130 --graph-ms 5
        ;;
    grid)
        PYTHONPATH=$REPO step grid 240 python3 -m benchmarks.pooling_grid_gpu --out "$OUT/grid" \
            --sections short_correctness skew grid --budget-s 200 --graph-ms 5 ${GRID_ARGS:-}
        grep -A14 "^## Grid: wins" "$OUT/grid/pooling_grid.md"
        ;;
    grouped)
        PYTHONPATH=$REPO step grouped 170 python3 -m benchmarks.recsys_grouped_gpu --out "$OUT/grouped.json" \
            --budget-s 130
        ;;
    padded)
        PYTHONPATH=$REPO step padded 200 python3 -m benchmarks.pooling_grid_gpu --out "$OUT/padded" \
            --sections padded_correctness padded --budget-s 150 --graph-ms 5
        ;;
    *) echo "unknown step $name (demo forms recsys grid grouped padded)" | tee -a "$OUT/steps.txt" ;;
    esac
done
cat "$OUT/steps.txt"
# the device returns at most 8 files: everything but the step list and the GPU line goes back as one archive
(cd "$OUT" && tar czf ../fuse-results.tgz --exclude=steps.txt --exclude=gpu.txt . && find . -mindepth 1 \
    ! -name steps.txt ! -name gpu.txt -delete && mv ../fuse-results.tgz results.tgz)
