"""The vocabulary head and the logits-transform decision of every causal LM of the installed transformers, from the
AST alone (no probes, seconds): run it before and after a change to understand's logits reading and diff the JSON.

    python -m benchmarks.logits_decisions OUT.json
"""

from __future__ import annotations

import json
import sys

from pipelines.autopatch import understand
from pipelines.autopatch.resolve import resolve
from pipelines.autopatch.scan import causal_lms


def decisions() -> dict[str, list[str]]:
    found = {}
    for model in sorted(causal_lms()):
        try:
            facts = understand.read_facts(resolve(model))
            decision = understand.decide_logits_transform(facts)
            found[model] = [facts.head_attr, repr(decision.value), decision.status.value, decision.reason[:200]]
        except Exception as exc:  # a model understand cannot read at all: recorded, not fatal
            found[model] = ["error", type(exc).__name__, str(exc)[:200]]
    return found


if __name__ == "__main__":
    found = decisions()
    with open(sys.argv[1], "w") as out:
        json.dump(found, out, indent=1)
    print(f"{len(found)} models")
