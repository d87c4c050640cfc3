"""debug: when a patched model diverges, say which kernel swap is wrong (LinkedIn's planned liger-debug).

The whole-model check (`model_check`) runs once with the apply function's flags as the convergence test passes
them, then once with each kernel flag turned off; a flag whose removal makes the model match is a culprit. Then
every swapped module runs beside its HF original on the inputs the HF model gave it, in execution order, in fp32
and bf16; the first that differs is named with its path, dtype, errors and the Liger class that replaced it.

`liger-bot debug MODEL --repo DIR [--set field=value]` runs it on the checkout's patch when the target already
has `apply_liger_kernel_to_<model>`, else on a patch generated (with the overrides) in a scratch clone: the
user's checkout is never written. verify runs it by itself when the whole-model gate fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipelines.autopatch import verify
from pipelines.autopatch.profile import Profile
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus

DIAGNOSIS = "Diagnosis (liger-bot debug)"


@dataclass(frozen=True)
class Diagnosis:
    data: dict

    @property
    def culprits(self) -> list[str]:
        """Flags whose removal alone makes the whole model match (with some Liger kernel still running)."""
        return [row["off"] for row in self.data.get("flags", []) if row.get("ok") and row.get("kernels") != []]

    @property
    def first_diverging(self) -> dict | None:
        return self.data.get("first_diverging")

    def summary(self, separator: str = "\n") -> str:
        """One finding a line; a table cell (which folds line breaks into spaces) takes "; " instead: folded, "diverges
        with X=False: matches" read as X's removal failing to help (Whisper's FLCE culprit, eighth session)."""
        whole = self.data.get("whole_model", {})
        lines = [f"whole model (fp32, class-level patch): {'matches' if whole.get('ok') else 'diverges'}"]
        if "error" in whole:
            lines[0] += f" ({whole['error']})"
        for row in self.data.get("flags", []):
            verdict = "matches" if row["ok"] else "still diverges"
            if row["ok"] and row.get("kernels") == []:  # nothing of Liger's ran: the class-level patch swapped nothing
                verdict += " (vacuously: no Liger kernel ran with it off)"
            lines.append(f"with {row['off']}=False: {verdict}" + (f" ({row['error']})" if row.get("error") else ""))
        first = self.first_diverging
        if first:
            lines.append(f"first diverging module: {describe(first)}")
        else:
            lines.append(
                f"no swapped module differs from its HF original ({len(self.data.get('modules', []))} compared)"
            )
        if "rounding_control" in self.data:
            lines.append(verify.control_summary(self.data["rounding_control"]))
        return separator.join(lines)

    def to_json(self) -> dict:
        return {"culprits": self.culprits, **self.data}


def describe(row: dict) -> str:
    settings = ", ".join(f"{k}={v!r}" for k, v in (row.get("settings") or {}).items())
    where = f"`{row['module']}` ({row['hf']} replaced by {row['liger']}{f'({settings})' if settings else ''})"
    if "error" in row:
        return f"{where}: {row['error']}"
    if row["where"] == "fp32":
        return f"{where}: fp32 max abs error {row['fp32_max_abs']:.2e} (relative {row['fp32_rel']:.2e})"
    return (
        f"{where}: bf16 mean error against float64 {row['bf16_liger_error']:.2e}, the HF module's own "
        f"{row['bf16_hf_error']:.2e} (max abs difference {row['bf16_max_abs']:.2e}; fp32 relative {row['fp32_rel']:.1e})"
    )


def diagnose(profile: Profile, root: Path, runner: verify.Runner) -> Diagnosis | str:
    """The diagnosis, or why none could be made."""
    spec = verify.model_check_spec(profile, root, verify.check_device(runner))
    proc, found = verify.run_model_check(spec, root, runner, debug=True)
    if found is None:
        return f"debug did not finish: exit {proc.returncode}\n{proc.tail(15)}"
    return Diagnosis(found)


def diagnosis_gate(profile: Profile, root: Path, runner: verify.Runner) -> GateResult:
    found = diagnose(profile, root, runner)
    text = found if isinstance(found, str) else found.summary(separator="; ")
    return GateResult(DIAGNOSIS, GateStatus.FAIL, text, hard=False)
