#!/usr/bin/env bash
# Prepares, on the CPU host, what benchmarks/chunked_loss_gpu.sh needs on the GPU host, in one git-ignored folder
# (default .chunked, carried to the device, well under the 64 MiB carry limit):
#   .chunked/lk          the slim Liger-Kernel 0.8.5 checkout and .chunked/wheels, as benchmarks/perf_gpu_prepare.sh
#                        builds them (that script runs first), plus one branch per generated chunked loss
#                        (`liger-bot/chunked-loss-NAME`), each made by the real CLI from a fresh `main`
#   .chunked/losses.txt  one line per loss: NAME BRANCH AGAINST (Liger's own class beside it, module:Class, or -)
#   .chunked/prepare     each run's --json result, its log and its out folder (PR body; the CPU gates ran here)
#
# The losses: two plain functions of benchmarks/chunked_losses.py, two TRL loss types Liger 0.8.5 lacks, and the
# leave-one-out regenerations of Liger's own DPO (its ten-type family) and ORPO under new names (loo_dpo, loo_orpo),
# so Liger's hand-written class is the baseline beside them. A refused loss is reported and left out of losses.txt.
#
#   bash benchmarks/chunked_loss_gpu_prepare.sh [.chunked]        # then: the device call in chunked_loss_gpu.sh
set -euo pipefail
DEST=${1:-.chunked}
PY=${PYTHON:-python3}
LIGER_BOT=${LIGER_BOT:-liger-bot}
PYTHON="$PY" LIGER_BOT="$LIGER_BOT" bash "$(dirname "$0")/perf_gpu_prepare.sh" "$DEST" >/dev/null
mkdir -p "$DEST/prepare"
: >"$DEST/losses.txt"
loo_spec() {  # the leave-one-out's SPEC and settings for one of Liger's losses, from its one table
  "$PY" -c "import sys; from benchmarks.chunked_loss_leave_one_out import CASES; c = CASES[sys.argv[1]]; \
print(' '.join([c[0], *(f'--set {s}' for s in c[1])]))" "$1"
}

generate() {  # name against spec [settings...]
  local name=$1 against=$2 t0=$(date +%s)
  shift 2
  git -C "$DEST/lk" checkout -q main
  local rc=0
  "$LIGER_BOT" chunked-loss "$@" --repo "$DEST/lk" --name "$name" --out "$DEST/prepare/$name" --json \
    >"$DEST/prepare/$name.json" 2>"$DEST/prepare/$name.log" || rc=$?
  local branch="liger-bot/chunked-loss-$name"
  if git -C "$DEST/lk" rev-parse -q --verify "refs/heads/$branch" >/dev/null; then
    echo "$name $branch $against" >>"$DEST/losses.txt"
    echo "$name: $branch (exit $rc, $(( $(date +%s) - t0 )) s): $(grep -c ': PASS: ' "$DEST/prepare/$name.log") gates PASS"
  else
    echo "$name: no branch (exit $rc): $(tail -n 3 "$DEST/prepare/$name.log")"
  fi
}

swapped() {  # Liger's own test file of a leave-one-out loss, its imports pointing at the generated class
  local loss=${1#loo_}
  git -C "$DEST/lk" checkout -q "liger-bot/chunked-loss-$1"
  "$PY" -c "import sys; from pathlib import Path; from benchmarks.chunked_loss_leave_one_out import CASES, swapped_test; \
c = CASES[sys.argv[1]]; t = swapped_test(Path(sys.argv[2]), sys.argv[1], c[2]); \
Path(sys.argv[3]).write_text(t.read_text()); t.unlink(); print(c[3])" "$loss" "$DEST/lk" \
    "$DEST/liger_tests/$1.py" >"$DEST/liger_tests/$1.select"
}

# LOSSES picks a subset (default: all nine); Liger's own test file is kept for every leave-one-out loss (DPO's 490
# cases, each compiling Liger's chunk, need chunked_loss_gpu.py's --liger-tests-workers to fit a device call)
LOSSES=${LOSSES:-slic apo_zero_unpaired ipo sigmoid_norm loo_dpo loo_orpo loo_cpo loo_simpo loo_kto}
want() { [[ " $LOSSES " == *" $1 "* ]]; }
mkdir -p "$DEST/liger_tests"
! want slic || generate slic - benchmarks/chunked_losses.py:slic
! want apo_zero_unpaired || generate apo_zero_unpaired - benchmarks/chunked_losses.py:apo_zero_unpaired --set pairing=unpaired
! want ipo || generate ipo - trl:dpo:ipo
! want sigmoid_norm || generate sigmoid_norm - trl:dpo:sigmoid_norm
# shellcheck disable=SC2046  # the SPEC and its --set words
! want loo_dpo || generate loo_dpo test.chunked_loss.test_dpo_loss:LigerLMHeadDPO $(loo_spec dpo)
# Liger's ORPO, CPO and SimPO heads take no reference input: the adapters give them bench's (x, ref_x, y) call
# shellcheck disable=SC2046
! want loo_orpo || generate loo_orpo benchmarks.chunked_loss_sides:LigerLMHeadORPO $(loo_spec orpo)
# shellcheck disable=SC2046
! want loo_cpo || generate loo_cpo benchmarks.chunked_loss_sides:LigerLMHeadCPO $(loo_spec cpo)
# shellcheck disable=SC2046
! want loo_simpo || generate loo_simpo benchmarks.chunked_loss_sides:LigerLMHeadSimPO $(loo_spec simpo)
# shellcheck disable=SC2046
! want loo_kto || generate loo_kto test.chunked_loss.test_kto_loss:LigerLMHeadKTO $(loo_spec kto)
for name in loo_dpo loo_orpo loo_cpo loo_simpo loo_kto; do
  if want "$name" && grep -q "^$name " "$DEST/losses.txt"; then swapped "$name"; fi
done
git -C "$DEST/lk" checkout -q main
git -C "$DEST/lk" gc -q --prune=now
cat "$DEST/losses.txt"
for path in "$DEST/lk" "$DEST/wheels" "$DEST"; do du -sh "$path"; done  # one du each: du counts a folder once
