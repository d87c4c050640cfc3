"""`fuse`: understand -> act -> verify against a Liger-Kernel checkout, on a branch, with the report written."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from pipelines import target
from pipelines.changeset import checkstyle_gate
from pipelines.changeset import format_with_target_style
from pipelines.contract import branch_name
from pipelines.fuse import act
from pipelines.fuse import model_spec
from pipelines.fuse.understand import Profile
from pipelines.fuse.understand import understand
from pipelines.fuse.verify import standalone_gate
from pipelines.fuse.verify import standalone_run
from pipelines.fuse.verify import verify
from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError
from pipelines.outcome import hard_failure
from pipelines.outcome import result_json


@dataclass
class FuseResult:
    profile: Profile
    branch: str = ""
    files: list[str] = field(default_factory=list)
    gates: list[GateResult] = field(default_factory=list)
    figures: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return hard_failure(self.gates)

    def to_json(self) -> dict:
        return result_json(self.profile, self.branch, self.files, self.gates, figures=self.figures)


def run(spec: str, repo: str, chain_index: int = 0, progress=lambda text: None) -> FuseResult:
    checkout = target.open_checkout(repo)
    model, inputs = model_spec.load(spec)
    progress(f"tracing {spec}")
    profile = understand(model, inputs)
    result = FuseResult(profile)
    if not profile.chains:
        return result  # nothing unmatched to write a pass for: the report lists the registry's matches
    if not 0 <= chain_index < len(profile.chains):
        raise PipelineError(f"--chain {chain_index} is out of range", hint=f"0..{len(profile.chains) - 1}")
    chain = profile.chains[chain_index]
    name = act.pass_name(chain.ops)
    branch = branch_name("fuse", name.replace("_", "-"))
    checkout.git.checkout(branch, create_from="HEAD")
    path = act.write_pass(checkout.root, spec, chain.ops, _chain_args(model, inputs, chain))
    runtime = act.write_runtime(checkout.root)
    files = [path, path.parent / "__init__.py", *runtime]
    written = [str(p.relative_to(checkout.root)) for p in files]
    format_with_target_style(checkout, written)  # the target's isort order and format, as autopatch's files
    progress(f"wrote {path.relative_to(checkout.root)}; verifying")
    result.gates, result.figures = verify(model, inputs, path)
    result.gates.insert(0, checkstyle_gate(checkout, [p for p in written if p.endswith(".py")]))
    model_file, factory = model_spec.parse(spec)
    result.gates.append(standalone_gate(standalone_run(checkout.root, model_file, factory)))
    checkout.git.commit_all(f"fuse: add the {name} pass (liger-bot fuse {spec})")
    result.branch = branch
    result.files = written
    return result


def _chain_args(model, inputs, chain) -> list[int]:
    """Extra tensor arguments of each op in the chain, read again from a fresh trace."""
    import torch

    from pipelines.fuse.runtime.chains import op_key

    found = []

    def record(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.name == chain.where and not found:
                run, current = [], node
                for _ in chain.ops:
                    run.append(current)
                    current = next(iter(current.users), None)
                if tuple(op_key(n) for n in run) == chain.ops:
                    found.extend([None if isinstance(a, torch.fx.Node) else repr(a) for a in n.args[1:]] for n in run)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=record)(*inputs)
    return found or [[] for _ in chain.ops]
