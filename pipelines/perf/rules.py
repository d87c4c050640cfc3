"""The optimisation loop's rules as plain functions of measured times (LinkedIn's liger-kernel-perf guardrails).

Times are `{pass: {size: ms}}`, medians from the target's own benchmark framework. A variant is judged against
the baseline (v0) for regressions and against the best so far for gain:

- reject: any failing test; > 5% slower on the target pass at a size that is not a target size; > 10% slower on
  another pass at any size;
- gain: the geometric mean over the target sizes of best / variant on the target pass, minus one;
- stop: after 8 variants, after 2 variants in a row that pass the guardrails with under 1% gain (a rejected
  variant does not count towards these), or when the target is met: at every target size the target pass is at
  least `target_speedup` times as fast as torch.compile of the reference.

A point (pass, size) whose baseline is launch-bound (`launch_bound`) is measured and shown but never the basis of a
rejection: there the time is the host's and the launches', not the kernel's bytes, and it swings by tens of percent
between two timings of the same code.

The launch sweep's choice is a rule too: per pass and BLOCK_SIZE, the config with the least total time over the
sizes of that BLOCK_SIZE, kept only when it beats the kernel's own settings by more than the gain threshold.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace

from pipelines import graph_timing

Times = Mapping[str, Mapping[str, float]]
PASSES = ("forward", "backward", "full")

ACCEPTED = "ACCEPTED"
REJECTED = "REJECTED"
NO_GAIN = "NO GAIN"


@dataclass(frozen=True)
class Rules:
    target_pass: str
    target_sizes: tuple[str, ...]
    target_speedup: float = 1.0  # over torch.compile of the reference, on the target pass at the target sizes
    max_variants: int = 8
    min_gain: float = 0.01
    patience: int = 2
    size_regression: float = 0.05
    pass_regression: float = 0.10
    not_judged: tuple[tuple[str, str, str], ...] = ()  # (pass, size, why): shown, never the basis of a rejection

    def other_passes(self, times: Times) -> list[str]:
        return [p for p in times if p != self.target_pass]

    def judged(self, pass_name: str, size: str) -> bool:
        return not any(p == pass_name and s == size for p, s, _ in self.not_judged)


# A point is launch-bound when it takes less than LAUNCH_FLOOR_US, or, when it was timed with the host in the loop
# (do_bench, not a CUDA graph), more than LAUNCH_BOUND_K times what its bytes need at the copy ceiling measured in
# the same run. K = 4 (25% of the copy ceiling) from the H200 runs of issue 12 (benchmarks/NOTES.md): the points
# that are host-bound by their own evidence (slower than a size with more bytes: backward 1024x4096 0.361 ms vs
# 8192x4096 0.237 ms, full 4096x4096 0.810 vs 8192x4096 0.619) sat at 6.2x (forward 2048x4096) to 43x (backward
# 1024x4096) their bound, while the sizes the bytes dominate ran at 1.1x to 3.7x, and the slowest row-wise backward
# measured at a large size ran at 26% of copy (3.8x). Under a CUDA graph the host is out of the timing, and a point
# far from its bytes bound is a slow kernel, which is exactly what a variant must not make slower: only the floor
# applies there (under 10 us a pass is two or three launches' latency, and 5% of it is launch jitter).
LAUNCH_BOUND_K = 4.0
LAUNCH_FLOOR_US = graph_timing.LAUNCH_FLOOR_US  # one floor for the perf rules and the kernel benchmark
HOST_TIMED = graph_timing.HOST_TIMED


def launch_bound(
    baseline: Times,
    touched: Mapping[str, Mapping[str, int]],
    copy_gbps: float | None,
    keep: Iterable[str] = (),
    methods: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[tuple[str, str, str], ...]:
    """(pass, size, why) for each baseline point that is launch-bound; sizes in `keep` (the targets) always judged.
    `methods` ({pass: {size: method}}) says how each point was timed; a point without one counts as host-timed.
    Without the copy ceiling or a point's bytes only the floor applies."""
    out = []
    for pass_name, by_size in baseline.items():
        for size, ms in by_size.items():
            if size in keep:
                continue
            us = ms * 1e3
            n_bytes = touched.get(size, {}).get(pass_name)
            bound_us = n_bytes / (copy_gbps * 1e9) * 1e6 if n_bytes and copy_gbps else None
            host_timed = (methods or {}).get(pass_name, {}).get(size, "do_bench") in HOST_TIMED
            if graph_timing.under_floor(ms):
                out.append((pass_name, size, graph_timing.under_floor(ms)))
            elif host_timed and bound_us is not None and us > LAUNCH_BOUND_K * bound_us:
                out.append((pass_name, size, f"launch-bound, {us:.0f} us vs {bound_us:.0f} us bound, host-timed"))
    return tuple(out)


@dataclass(frozen=True)
class Verdict:
    status: str
    gain: float = 0.0
    reasons: tuple[str, ...] = ()

    @property
    def counts_as_low(self) -> bool:
        return self.status != REJECTED and self.gain < 0.01


def _pct(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:+.1f}%"


def regressed_points(rules: Rules, baseline: Times, variant: Times) -> list[tuple[str, str, float]]:
    """(pass, size, limit) wherever the variant is slower than the baseline by more than that guardrail allows."""
    points = []
    for size, old in baseline.get(rules.target_pass, {}).items():
        new = variant.get(rules.target_pass, {}).get(size)
        if size not in rules.target_sizes and new is not None and new > old * (1 + rules.size_regression):
            points.append((rules.target_pass, size, rules.size_regression))
    for pass_name in rules.other_passes(baseline):
        for size, old in baseline[pass_name].items():
            new = variant.get(pass_name, {}).get(size)
            if new is not None and new > old * (1 + rules.pass_regression):
                points.append((pass_name, size, rules.pass_regression))
    return [(p, s, limit) for p, s, limit in points if rules.judged(p, s)]


def regressions(rules: Rules, baseline: Times, variant: Times) -> list[str]:
    """Why the variant breaks a guardrail against the baseline (empty: it does not)."""
    reasons = []
    for pass_name, size, limit in regressed_points(rules, baseline, variant):
        where = " off target" if pass_name == rules.target_pass else ""
        change = _pct(variant[pass_name][size], baseline[pass_name][size])
        reasons.append(f"{pass_name} at {size}: {change} (limit +{limit:.0%}{where})")
    return reasons


def median_of_rounds(rounds: list[Times]) -> dict[str, dict[str, float]]:
    """Per pass and size, the median over rounds that measured it."""
    merged: dict[str, dict[str, list[float]]] = {}
    for times in rounds:
        for pass_name, by_size in times.items():
            for size, ms in by_size.items():
                merged.setdefault(pass_name, {}).setdefault(size, []).append(ms)
    return {p: {s: sorted(v)[len(v) // 2] for s, v in by_size.items()} for p, by_size in merged.items()}


def with_rechecked(times: Times, rechecked: Times) -> dict[str, dict[str, float]]:
    """`times` with the points measured again replaced by their re-measured medians."""
    return {p: {**by_size, **rechecked.get(p, {})} for p, by_size in times.items()}


def rejudge(
    rules: Rules,
    baseline: Times,
    best: Times,
    variant: Times,
    baseline_rounds: list[Times],
    variant_rounds: list[Times],
) -> Verdict:
    """The verdict once the regressed points were timed again, baseline and variant in alternate rounds: a
    regression that one noisy median showed and the rounds do not is not a regression (the H200 run rejected a
    -18.9% backward for a +47.8% forward at 4096x4096 that a second look did not confirm)."""
    again_baseline = with_rechecked(baseline, median_of_rounds(baseline_rounds))
    again_variant = with_rechecked(variant, median_of_rounds(variant_rounds))
    verdict = judge(rules, again_baseline, best, again_variant, tests_ok=True)
    rounds = len(variant_rounds)
    note = f"regressions re-timed in {rounds} alternating rounds"
    if verdict.status == REJECTED:
        return replace(verdict, reasons=(*verdict.reasons, f"confirmed: {note}"))
    return replace(verdict, reasons=(f"not confirmed: {note}",))


def gain(rules: Rules, best: Times, variant: Times) -> float:
    """Geometric mean over the target sizes of best / variant on the target pass, minus one."""
    ratios = [best[rules.target_pass][s] / variant[rules.target_pass][s] for s in rules.target_sizes]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) - 1


def target_met(rules: Rules, variant: Times, compiled: Times) -> bool:
    return all(
        compiled[rules.target_pass][s] / variant[rules.target_pass][s] >= rules.target_speedup
        for s in rules.target_sizes
    )


def judge(
    rules: Rules,
    baseline: Times,
    best: Times,
    variant: Times | None,
    tests_ok: bool,
    test_summary="",
    numeric_failure: str = "",
) -> Verdict:
    """`numeric_failure`: why the numeric gate (the variant against v0 at the run's sizes) failed; "" when it passed
    or did not run. It rejects a variant as a failing test does."""
    if not tests_ok:
        return Verdict(REJECTED, reasons=(f"tests failed: {test_summary}".strip(),))
    if numeric_failure:
        return Verdict(REJECTED, reasons=(f"numeric gate: {numeric_failure}",))
    if variant is None:
        return Verdict(REJECTED, reasons=("no measurement",))
    broken = regressions(rules, baseline, variant)
    if broken:
        return Verdict(REJECTED, gain(rules, best, variant), tuple(broken))
    won = gain(rules, best, variant)
    return Verdict(ACCEPTED if won > 0 else NO_GAIN, won)


@dataclass(frozen=True)
class LoopState:
    """Where the loop stands after the variants so far (v0 is the starting best)."""

    variants: int = 0
    best: str = "v0"
    low_in_a_row: int = 0
    met: bool = False
    history: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (variant, status)


def advance(rules: Rules, state: LoopState, name: str, verdict: Verdict, met: bool) -> LoopState:
    best = name if verdict.status == ACCEPTED else state.best
    if verdict.status == REJECTED:
        low = state.low_in_a_row
    else:
        low = state.low_in_a_row + 1 if verdict.gain < rules.min_gain else 0
    return replace(
        state,
        variants=state.variants + 1,
        best=best,
        low_in_a_row=low,
        met=state.met or (met and verdict.status == ACCEPTED),
        history=(*state.history, (name, verdict.status)),
    )


def stop_reason(rules: Rules, state: LoopState) -> str | None:
    if state.met:
        return f"target met by {state.best}: {rules.target_pass} at least {rules.target_speedup:g}x torch.compile"
    if state.low_in_a_row >= rules.patience:
        return f"diminishing returns: the last {rules.patience} variants gained under {rules.min_gain:.0%}"
    if state.variants >= rules.max_variants:
        return f"budget of {rules.max_variants} variants spent"
    return None


# --- the time budget ------------------------------------------------------------------------------------------

# What is left of --budget-s once the baseline is measured is split: the launch sweep (v1: its sweep child, its
# tests and timing, and any re-timing of its regressions) may use SWEEP_SHARE of it, the structural variants have
# the rest; a structural variant's re-timing may use RECHECK_SHARE of what is left when it starts. In the H200 run
# (NOTES, "second run") v1's re-timing (6 children of ~18 s) spent the whole budget and v2 never ran.
SWEEP_SHARE = 0.4
SWEEP_CHILD_SHARE = 0.5  # of v1's window, the sweep child's own limit (it stops trying configs after it)
RECHECK_SHARE = 0.25


def recheck_rounds(now: float, window_end: float | None, child_s: float, max_rounds: int) -> int:
    """How many alternating rounds (two children each, of about `child_s` seconds) fit before `window_end`."""
    if window_end is None:
        return max_rounds
    if child_s <= 0:
        return max_rounds if now < window_end else 0
    return max(0, min(max_rounds, int((window_end - now) // (2 * child_s))))


# --- the launch sweep -----------------------------------------------------------------------------------------

DEFAULT = (None, None)  # the kernel's own (num_warps, num_stages)


def block_size(hidden: int) -> int:
    return 1 << max(0, (hidden - 1).bit_length())


def sizes_by_block(sizes: Mapping[str, int]) -> dict[int, list[str]]:
    """size key -> hidden, grouped by the BLOCK_SIZE Liger's calculate_settings gives that hidden size."""
    groups: dict[int, list[str]] = {}
    for key, hidden in sizes.items():
        groups.setdefault(block_size(hidden), []).append(key)
    return groups


def warp_candidates(block: int, warps: Iterable[int] = (4, 8, 16, 32)) -> list[int]:
    """num_warps that leave every thread at least one element of the block."""
    return [w for w in warps if 32 * w <= max(block, 32)]


def choose_launch(
    measured: Mapping[tuple, Times], pass_name: str, groups: Mapping[int, list[str]], min_gain: float = 0.01
) -> dict[int, tuple]:
    """BLOCK_SIZE -> the (num_warps, num_stages) with the least total time over that block's sizes, for blocks where
    it beats the kernel's own settings (DEFAULT, which must be measured) by more than `min_gain`."""
    chosen = {}
    for block, keys in groups.items():

        def total(config, keys=keys):
            times = measured[config].get(pass_name, {})
            return sum(times[k] for k in keys) if all(k in times for k in keys) else math.inf

        default = total(DEFAULT)
        best = min(measured, key=lambda c: (total(c), str(c)))
        if total(best) < default * (1 - min_gain):
            chosen[block] = best
    return chosen
