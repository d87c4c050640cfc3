"""The scan's classification, on real models: understand and act's plan decide each verdict."""

from __future__ import annotations

from pipelines.autopatch.scan import Verdict
from pipelines.autopatch.scan import classify


def test_classification_follows_acts_plan_on_real_models():
    """Real understand + act.plan: every kernel applied, some left out (which, why, the command), or refused."""
    from pipelines.autopatch.understand import understand

    models = ("hyperclovax", "phi", "dbrx", "cpmant")
    rows = {m: classify(m, f"{m}ForCausalLM", {"llama"}, None, understand) for m in models}
    assert rows["hyperclovax"].verdict is Verdict.PATCHABLE  # its logit scale folds into FLCE: nothing left out
    assert "FusedLinearCrossEntropy" in rows["hyperclovax"].reason
    phi = rows["phi"]
    assert phi.verdict is Verdict.PARTIAL and "Left out: the MLP (PhiMLP)" in phi.reason
    assert "`/liger kernel gelu_new`" in phi.reason
    # DBRX's tiny config is repaired now (its attention sub-config's rope_theta); its experts' activation is its own
    assert rows["dbrx"].verdict is Verdict.PARTIAL and "not a transformers ACT2FN name" in rows["dbrx"].reason
    assert rows["cpmant"].verdict is Verdict.REFUSED and "cpmant.encoder.layers" in rows["cpmant"].reason
