"""Pipeline adapters: how the worker runs each pipeline through the one job flow, one row per pipeline.

understand -> [checkpoint] -> act + verify -> push -> PR is the same for every pipeline; an adapter turns a job's
words (target, options, `field=value` settings) into the pipeline's calls, and the pipeline's results into what
the worker shows and pushes: a profile (JSON, and a markdown table of it), the branch, the gates, the PR's title
and body. `verify_branch` is what `liger-bot verify` runs on a GPU runner against the pushed branch; a pipeline
without one always verifies in the worker.

`bot/` stays ignorant of kernels: every pipeline import happens inside these functions, so the web process never
loads torch or transformers. The worker's rows (PIPELINES) run understand and act + verify in a child process
(bot.isolation): those stages run the target repository's code.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError
from pipelines.outcome import hard_failure
from pipelines.target import Checkout

BRANCH_PREFIX = "liger-bot/"
# Request options the worker sets (never a command's: `--llm:...` is no option of any verb's grammar)
TIER3_DRAFTS = "llm:tier3"  # "on": a tier-3 kernel is understood for the provider to draft, not refused
DRAFT = "llm:draft"  # the provider's draft of a tier-3 kernel's ops file, to write and verify in the stage child
Progress = Callable[[object], None]  # text lines, or GateResults as verify produces them


@dataclass(frozen=True)
class Request:
    """One job's input to a pipeline, on a fresh checkout of the default branch."""

    checkout: Checkout
    target: str
    settings: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)
    out_dir: Path | None = None  # reports, benchmark tables (no .py: the verify workflow keeps it in the checkout)
    profile: dict | None = None  # the approved profile (JSON): act and verify apply it instead of re-deriving it


@dataclass(frozen=True)
class Understood:
    profile: dict  # JSON, kept on the job and shown at the checkpoint
    branch: str  # liger-bot/<verb>-<name>; "" when there is nothing to propose
    needs_review: tuple[str, ...] = ()
    summary: str = ""  # said when there is nothing to propose


@dataclass(frozen=True)
class Outcome:
    branch: str
    gates: list[GateResult]
    files: list[str]
    pr_title: str
    pr_body: str
    ok: bool
    profile: dict | None = None
    verify_target: str = ""  # `liger-bot verify --target` on a GPU runner; "" : this pipeline verifies here


@dataclass(frozen=True)
class Adapter:
    validate_settings: Callable[[str | None, list[str]], None]  # raises PipelineError with the reply
    understand: Callable[[Request], Understood]
    act_verify: Callable[[Request, Progress], Outcome]
    profile_table: Callable[[dict], str]
    verify_branch: Callable[[Request, Progress], list[GateResult]] | None = None


def _cell(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")[:120]


def no_settings(_target: str | None, settings: list[str]) -> None:
    if settings:
        raise PipelineError("this command takes no field=value settings")


def file_in_checkout(checkout: Checkout, spec: str) -> Path:
    """The file of `path/in/repo.py[:name]`, refused unless it is a file inside the checkout (symlinks resolved)."""
    path_part = spec.partition(":")[0]
    root = checkout.root.resolve()
    resolved = (root / path_part).resolve()
    if Path(path_part).is_absolute() or not resolved.is_relative_to(root) or not resolved.is_file():
        raise PipelineError(
            f"`{path_part}` is not a file of this repository's default branch",
            hint="name a .py file by its path from the repository root",
        )
    return resolved


# --- autopatch ----------------------------------------------------------------------------------------------


def autopatch_settings(_target: str | None, settings: list[str]) -> None:
    from pipelines.autopatch.profile import parse_overrides

    parse_overrides(settings)


def real_autopatch_understand(model: str, checkout: Checkout):
    """The real understand, refusing before the checkpoint a model the target supports already."""
    from pipelines.autopatch import pipeline

    profile = pipeline.understand_model(model, checkout)
    pipeline.refuse_supported(checkout, profile)
    return profile


def real_autopatch_run(checkout: Checkout, profile, progress):
    from pipelines.autopatch import pipeline

    return pipeline.run_pipeline(checkout, profile, progress)


def autopatch_profile_table(profile: dict) -> str:
    rows = ["| decision | value | settled by | status |", "|---|---|---|---|"]
    for key, decision in (profile.get("decisions") or {}).items():
        status = decision.get("status", "")
        shown = f"**{status}**" if status != "settled" else status
        rows.append(f"| `{key}` | `{_cell(decision.get('value'))}` | {decision.get('method', '')} | {shown} |")
    return "\n".join(rows)


def _attr(result, name: str, default=None):
    return result.get(name, default) if isinstance(result, dict) else getattr(result, name, default)


def autopatch_adapter(understand: Callable | None = None, run_pipeline: Callable | None = None) -> Adapter:
    """The autopatch row; tests hand in other `understand(model, checkout)` / `run_pipeline(...)` entry points."""
    from bot.scan import call_understand

    understand = understand or real_autopatch_understand
    run_pipeline = run_pipeline or real_autopatch_run

    def profile_for(request: Request):
        profile = call_understand(understand, request.target, request.checkout)
        if request.settings:
            from pipelines.autopatch.profile import parse_overrides

            profile = profile.with_overrides(parse_overrides(list(request.settings)))
        return profile

    def understood(request: Request) -> Understood:
        profile = profile_for(request)
        branch = f"{BRANCH_PREFIX}autopatch-{profile.model_type}"
        return Understood(profile.to_json(), branch, tuple(profile.needs_review()))

    def act_verify(request: Request, progress: Progress) -> Outcome:
        profile = approved_or_understood(request, profile_for)
        result = run_pipeline(request.checkout, profile, progress)
        gates = list(_attr(result, "gates") or [])
        return Outcome(
            branch=_attr(result, "branch") or f"{BRANCH_PREFIX}autopatch-{profile.model_type}",
            gates=gates,
            files=list(_attr(result, "files") or []),
            pr_title=_attr(result, "pr_title") or f"Add Liger Kernel support for {profile.model_type}",
            pr_body=_attr(result, "pr_body") or "",
            ok=_attr(result, "ok", True) is not False and not hard_failure(gates),
            profile=profile.to_json(),
            verify_target=profile.model_type,
        )

    return Adapter(autopatch_settings, understood, act_verify, autopatch_profile_table, verify_autopatch_branch)


def approved_or_understood(request: Request, understand: Callable[[Request], object]):
    """The approved profile when the job holds one (what the reviewer saw is what is applied), else understand."""
    from pipelines.autopatch.pipeline import approved_profile

    if request.profile:
        return approved_profile(request.profile, list(request.settings))
    return understand(request)


def _understood_here(request: Request):
    from pipelines.autopatch import pipeline
    from pipelines.autopatch.profile import parse_overrides

    profile = pipeline.understand_model(request.target, request.checkout)
    return profile.with_overrides(parse_overrides(list(request.settings))) if request.settings else profile


def verify_autopatch_branch(request: Request, progress: Progress) -> list[GateResult]:
    """Autopatch's gates on a checkout of the bot's branch (the patch already committed), for the approved profile
    when the request carries it; GPU gates run when this host has a GPU and SKIP (never PASS) when it has none."""
    from pipelines.autopatch import verify

    profile = approved_or_understood(request, _understood_here)
    return verify.verify(profile, request.checkout.root, verify.LocalRunner.detect(), progress)


# --- kernel -------------------------------------------------------------------------------------------------

KERNEL_FIELDS = (
    "operation_name",
    "module_class_name",
    "functional_name",
    "tier",
    "tier_description",
    "closest_existing_kernel",
    "forward_computation",
    "gradient_formulas",
    "backward_recompute",
    "source",
    "drafted_by",  # tier 3 with the provider on: who drafts it, and why the engine did not
    "refusal",
)
# what the engine derives by lowering, which a tier-3 op has none of (its draft is the model's)
LOWERED_FIELDS = ("closest_existing_kernel", "forward_computation", "gradient_formulas", "backward_recompute")


def kernel_profile_table(profile: dict) -> str:
    rows = ["| field | value |", "|---|---|"]
    rows += [f"| {key} | `{_cell(profile[key])}` |" for key in KERNEL_FIELDS if key in profile]
    return "\n".join(rows)


def _kernel_spec(request: Request) -> str:
    if ":" in request.target or request.target.endswith(".py"):
        file_in_checkout(request.checkout, request.target)  # never a file outside the repository
    return request.target


def kernel_understand(request: Request) -> Understood:
    from pipelines.kernel import pipeline
    from pipelines.kernel.understand import Tier

    _, understanding, profile = pipeline.understand(
        _kernel_spec(request), request.checkout.root, request.options.get("name")
    )
    if understanding.tier == Tier.COMPLEX and request.options.get(TIER3_DRAFTS) != "on":
        raise PipelineError(f"{request.target}: {understanding.refusal}", hint="the default engine refuses tier-3 ops")
    branch = f"{BRANCH_PREFIX}kernel-{understanding.spec.name}"
    if understanding.tier == Tier.COMPLEX:  # the provider is on: its draft waits for a person's approval
        from pipelines.kernel.draft import Tier3

        task = Tier3.of(understanding)
        drafted = {
            **{k: v for k, v in profile.to_json().items() if k not in LOWERED_FIELDS},
            "drafted_by": "the anthropic provider (tier 3)",
            "refusal": task.refusal,
            "reference_code": task.reference_source(),
        }
        return Understood(drafted, branch, needs_review=("drafted_by",))
    return Understood(profile.to_json(), branch)


def kernel_act_verify(request: Request, progress: Progress) -> Outcome:
    from pipelines.kernel import pipeline

    if DRAFT in request.options:
        return kernel_draft_attempt(request, progress)

    run = pipeline.run(
        _kernel_spec(request),
        request.checkout.root,
        request.options.get("name"),
        request.out_dir,
        progress=progress,
        force=request.options.get("force") == "yes",
    )
    title = f"Add {run.profile.module_class_name}: a Triton kernel generated from {request.target}"
    return _run_outcome(run, title, run.branch.removeprefix(f"{BRANCH_PREFIX}kernel-"))


def kernel_draft_attempt(request: Request, progress: Progress) -> Outcome:
    """One tier-3 draft (the provider's text, from the worker) written and judged here, in the stage child: the
    model's code runs only where every stage runs the target's code. A passing draft is committed on the branch."""
    from pipelines.kernel import draft
    from pipelines.kernel.spec import pascal

    checkout = request.checkout
    task = draft.Tier3.again(_kernel_spec(request), checkout.root, request.options.get("name"), refusal="")
    branch = f"{BRANCH_PREFIX}kernel-{task.name}"
    if checkout.git.current_branch() != branch:
        checkout.git.checkout(branch, create_from="HEAD")
    gates = draft.attempt(checkout, task, request.options[DRAFT])
    for gate in gates:
        progress(gate.said())
    ok = not hard_failure(gates)
    if not ok:  # the next draft starts from a clean checkout again (understand refuses a dirty one)
        for path in task.paths:
            checkout.path(path).unlink(missing_ok=True)
    else:
        checkout.git.commit_all(
            f"Add Liger{pascal(task.name)}Function: a tier-3 kernel drafted by the anthropic provider\n\n"
            f"liger-bot kernel {request.target} (tier 3; the test is liger-bot's, the ops file the provider's)"
        )
    title = f"Add Liger{pascal(task.name)}Function: a tier-3 kernel drafted for {request.target}"
    body = ""  # the worker writes it (bot.tier3): it holds the refusal, the drafts and their cost
    return Outcome(branch, gates, task.paths, title, body, ok)


def verify_kernel_branch(request: Request, progress: Progress) -> list[GateResult]:
    """The kernel's gates on the bot's branch; `target` is the kernel's name (the branch's suffix)."""
    from pipelines.kernel import verify
    from pipelines.kernel.act import FUNCTIONAL
    from pipelines.kernel.act import OPS_INIT
    from pipelines.kernel.act import TRANSFORMERS_INIT
    from pipelines.kernel.act import KernelFiles
    from pipelines.kernel.spec import validate_name

    name = validate_name(request.target)
    files = KernelFiles.of(name)
    own = [files.ops, files.module, files.test, files.benchmark]
    if not any(request.checkout.path(p).exists() for p in own):
        raise PipelineError(f"this checkout holds no kernel named {name!r}", hint="check out the bot's branch first")
    paths = [str(p) for p in (*own, OPS_INIT, TRANSFORMERS_INIT, FUNCTIONAL) if request.checkout.path(p).exists()]
    out_dir = request.out_dir or Path(tempfile.mkdtemp(prefix=f"liger-bot-verify-{name}-"))
    progress(f"verify: kernel {name} ({len(paths)} files)")
    return verify.verify(request.checkout, name, paths, out_dir)


# --- chunked-loss -------------------------------------------------------------------------------------------

CHUNKED_LOSS_FIELDS = (
    "loss_name",
    "kind",
    "base_class",
    "module_class_name",
    "functional_name",
    "source",
    "average_log_prob",
    "compute_nll_loss",
    "use_ref_model",
    "normalisation",
    "decomposition",
    "specialised",
)


def chunked_loss_settings(_target: str | None, settings: list[str]) -> None:
    from pipelines.chunked_loss.pipeline import parse_settings

    parse_settings(settings)


def chunked_loss_profile_table(profile: dict) -> str:
    rows = ["| field | value |", "|---|---|"]
    rows += [f"| {key} | `{_cell(profile[key])}` |" for key in CHUNKED_LOSS_FIELDS if key in profile]
    return "\n".join(rows)


def _loss_spec(request: Request) -> str:
    if not request.target.startswith("trl:"):
        file_in_checkout(request.checkout, request.target)  # never a file outside the repository
    return request.target


def chunked_loss_understand(request: Request) -> Understood:
    from pipelines.chunked_loss import pipeline

    _, understanding, profile = pipeline.understand(
        _loss_spec(request), request.checkout.root, request.options.get("name"), request.settings
    )
    return Understood(profile.to_json(), pipeline.branch_name(understanding.spec.name))


def chunked_loss_act_verify(request: Request, progress: Progress) -> Outcome:
    from pipelines.chunked_loss import pipeline

    run = pipeline.run(
        _loss_spec(request),
        request.checkout.root,
        request.options.get("name"),
        request.out_dir,
        progress=progress,
        settings=request.settings,
    )
    title = f"Add {run.profile.module_class_name}: a chunked loss generated from {request.target}"
    return _run_outcome(run, title, run.profile.loss_name)


def verify_chunked_loss_branch(request: Request, progress: Progress) -> list[GateResult]:
    """The loss's gates on the bot's branch; `target` is the loss's name (the branch's suffix)."""
    from pipelines.chunked_loss import verify
    from pipelines.chunked_loss.act import CHUNKED_INIT
    from pipelines.chunked_loss.act import FUNCTIONAL
    from pipelines.chunked_loss.act import LossFiles
    from pipelines.kernel.spec import validate_name

    name = validate_name(request.target)
    own = LossFiles.of(name).all
    if not any(request.checkout.path(p).exists() for p in own):
        raise PipelineError(
            f"this checkout holds no chunked loss named {name!r}", hint="check out the bot's branch first"
        )
    paths = [str(p) for p in (*own, CHUNKED_INIT, FUNCTIONAL) if request.checkout.path(p).exists()]
    out_dir = request.out_dir or Path(tempfile.mkdtemp(prefix=f"liger-bot-verify-{name}-"))
    progress(f"verify: chunked loss {name} ({len(paths)} files)")
    return verify.verify(request.checkout, name, paths, out_dir)


# --- fuse ---------------------------------------------------------------------------------------------------


def fuse_profile_table(profile: dict) -> str:
    rows = ["| found | where | ops | what happens |", "|---|---|---|---|"]
    for match in profile.get("matches") or []:
        kernel = match.get("kernel") or f"left alone: {match.get('reason', '')}"
        rows.append(f"| registry pattern `{match['pattern']}` | `{match['where']}` | | {_cell(kernel)} |")
    for index, chain in enumerate(profile.get("chains") or []):
        ops = " → ".join(op.split(":", 1)[-1] for op in chain["ops"])
        what = f"{chain['share']:.1%} of bytes written" + ("; the pass is written for this one" if index == 0 else "")
        rows.append(f"| unmatched chain {index} | `{chain['where']}` | `{_cell(ops)}` | {what} |")
    return "\n".join(rows)


def _fuse_spec(request: Request) -> str:
    """The absolute spec the fuse pipeline loads (it resolves paths against the process's directory)."""
    file = file_in_checkout(request.checkout, request.target)
    return f"{file}:{request.target.rpartition(':')[2]}"


def fuse_understand(request: Request) -> Understood:
    from pipelines.fuse import act
    from pipelines.fuse import model_spec
    from pipelines.fuse.understand import understand

    model, inputs = model_spec.load(_fuse_spec(request))
    profile = understand(model, inputs)
    if not profile.chains:
        found = len(profile.matches)
        return Understood(profile.to_json(), "", summary=f"Nothing left to fuse: {found} registry match(es), no chain.")
    name = act.pass_name(profile.chains[0].ops)
    return Understood(profile.to_json(), f"{BRANCH_PREFIX}fuse-{name.replace('_', '-')}")


def fuse_act_verify(request: Request, progress: Progress) -> Outcome:
    from pipelines.fuse import pipeline
    from pipelines.outcome import gates_table

    result = pipeline.run(_fuse_spec(request), str(request.checkout.root), 0, progress=progress)
    figures = "\n".join(f"- {key}: `{value}`" for key, value in result.figures.items())
    body = "\n\n".join(
        [
            f"## torch.compile pass for `{request.target}`",
            "### Verify",
            gates_table(result.gates),
            "### Figures",
            figures or "- (none)",
            "### Profile",
            fuse_profile_table(result.profile.to_json()),
        ]
    )
    return Outcome(
        branch=result.branch,
        gates=list(result.gates),
        files=list(result.files),
        pr_title=f"fuse: a torch.compile pass for {request.target}",
        pr_body=body + "\n",
        ok=not result.failed,
        profile=result.profile.to_json(),
    )


# --- perf ---------------------------------------------------------------------------------------------------


def _perf_options(request: Request):
    from pipelines.perf.pipeline import Options

    return Options(
        target_pass=request.options.get("pass", "backward"),
        target_speedup=float(request.options.get("target-speedup", 1.0)),
    )


def perf_profile_table(profile: dict) -> str:
    applies = list(dict.fromkeys(row["key"] for row in profile.get("catalogue") or [] if row.get("applies")))
    rows = ["| field | value |", "|---|---|", f"| kernel | `{_cell(profile.get('kernel', ''))}` |"]
    rows.append(f"| target | `{profile.get('target_pass')}` at {_cell(', '.join(profile.get('target_sizes') or []))} |")
    rows.append(f"| sizes | {_cell(', '.join(profile.get('sizes') or []))} |")
    rows.append(f"| structural variants that apply | {_cell(', '.join(applies) or 'none')} |")
    return "\n".join(rows)


def perf_understand(request: Request) -> Understood:
    from pipelines.perf import pipeline

    _, profile = pipeline.understand(request.target, request.checkout.root, _perf_options(request))
    return Understood(profile.to_json(), f"{BRANCH_PREFIX}perf-{profile.source.name.replace('_', '-')}")


def perf_act_verify(request: Request, progress: Progress) -> Outcome:
    from pipelines.perf import pipeline

    run = pipeline.run(request.target, request.checkout.root, _perf_options(request), request.out_dir, progress)
    if not run.branch and not run.failed:
        raise PipelineError(f"perf {request.target}: no variant beat the kernel ({run.stop})", hint="nothing to change")
    return Outcome(
        branch=run.branch or f"{BRANCH_PREFIX}perf-{request.target.replace('_', '-')}",
        gates=list(run.gates),
        files=run.to_json()["files"],
        pr_title=f"perf({request.target}): {run.profile.target_pass} faster ({run.best})",
        pr_body=run.pr_body,
        ok=not run.failed,
        profile=run.profile.to_json(),
    )


# --- the table ----------------------------------------------------------------------------------------------

# In process: what the stage's child runs (bot.isolation), and `liger-bot verify` on a runner holding no secrets.
AUTOPATCH = autopatch_adapter()
KERNEL = Adapter(no_settings, kernel_understand, kernel_act_verify, kernel_profile_table, verify_kernel_branch)
CHUNKED_LOSS = Adapter(
    chunked_loss_settings,
    chunked_loss_understand,
    chunked_loss_act_verify,
    chunked_loss_profile_table,
    verify_chunked_loss_branch,
)
FUSE = Adapter(no_settings, fuse_understand, fuse_act_verify, fuse_profile_table)
PERF = Adapter(no_settings, perf_understand, perf_act_verify, perf_profile_table)


def in_child(adapter: Adapter, name: str) -> Adapter:
    from bot.isolation import isolated

    return isolated(adapter, f"{__name__}:{name}")


# What the worker runs: each stage in a child process, away from the App's key and tokens.
PIPELINES: dict[str, Adapter] = {
    "autopatch": in_child(AUTOPATCH, "AUTOPATCH"),
    "kernel": in_child(KERNEL, "KERNEL"),
    "chunked-loss": in_child(CHUNKED_LOSS, "CHUNKED_LOSS"),
    "fuse": in_child(FUSE, "FUSE"),
    "perf": in_child(PERF, "PERF"),
}


def adapter_for(pipeline: str) -> Adapter:
    try:
        return PIPELINES[pipeline]
    except KeyError:
        raise PipelineError(f"no pipeline runs `{pipeline}` yet") from None


def profile_table(pipeline: str, profile: dict) -> str:
    adapter = PIPELINES.get(pipeline)
    return adapter.profile_table(profile) if adapter else ""


def settings_help(pipeline: str) -> str:
    """The `--set field=value` names and values a pipeline accepts (the provider's proposals are told them)."""
    if pipeline != "autopatch":
        return ""
    from pipelines.autopatch.profile import OVERRIDE_HELP

    return OVERRIDE_HELP


def _run_outcome(run, pr_title: str, verify_target: str) -> Outcome:
    """A file-writing pipeline's run (pipelines.outcome.PipelineRun: kernel, chunked-loss) as the job flow's Outcome."""
    return Outcome(
        branch=run.branch,
        gates=list(run.gates),
        files=list(run.files),
        pr_title=pr_title,
        pr_body=run.pr_body,
        ok=not run.failed,
        profile=run.profile.to_json(),
        verify_target=verify_target,
    )
