"""Sample contexts for kernel_templates/fuse/*.j2, built with the fuse pipeline's own functions (`act.pass_name`,
`act.pattern_source`) from op chains of the shapes its tracer reports: functions with a literal and a tensor
argument, and a method call."""

from __future__ import annotations

from pipelines.fuse import act

# (ops as `kind:target`, per op the arguments after the chained one: None is a tensor, else a literal's source)
CHAINS = (
    (("call_function:mul", "call_function:add", "call_function:tanh"), [["0.5"], [None], []]),
    (("call_function:silu", "call_method:sum"), [[], ["-1"]]),
)


def samples() -> list[tuple[str, dict]]:
    out = []
    for ops, op_args in CHAINS:
        name = act.pass_name(ops)
        params, body = act.pattern_source(ops, op_args)
        context = {"name": name, "ops": list(ops), "params": params, "body": body, "model_spec": "model.py:make"}
        out.append((name, context))
    return out
