"""The chunked-loss pipeline's row of the contract (pipelines.contract): a preference loss in, a chunked Liger
loss with its tests and benchmark out."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Progress
from pipelines.contract import Request
from pipelines.contract import Understood
from pipelines.contract import Usage
from pipelines.contract import field_table
from pipelines.contract import file_in_checkout
from pipelines.contract import run_outcome
from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError

USAGE = Usage(
    "SPEC [--name NAME] [--set field=value ...]",
    "turn a preference loss (`path/in/repo.py:Class_or_function`, or a TRL loss type such as `trl:dpo:ipo`) "
    "into a chunked Liger loss that never holds the full logits, with its tests and benchmark; verify it and "
    "open a draft PR",
    target="loss spec",
    takes_settings=True,
    options=("name",),
)
FIELDS = (
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


def validate_settings(_target: str | None, settings: list[str]) -> None:
    from pipelines.chunked_loss.pipeline import parse_settings

    parse_settings(settings)


def profile_table(profile: dict) -> str:
    return field_table(profile, FIELDS)


def _spec(request: Request) -> str:
    if not request.target.startswith("trl:"):
        file_in_checkout(request.checkout, request.target)  # never a file outside the repository
    return request.target


def understand(request: Request) -> Understood:
    from pipelines.chunked_loss import pipeline

    _, understanding, profile = pipeline.understand(
        _spec(request), request.checkout.root, request.options.get("name"), request.settings
    )
    return Understood(profile.to_json(), pipeline.branch_name(understanding.spec.name))


def act_verify(request: Request, progress: Progress) -> Outcome:
    from pipelines.chunked_loss import pipeline

    run = pipeline.run(
        _spec(request),
        request.checkout.root,
        request.options.get("name"),
        request.out_dir,
        progress=progress,
        settings=request.settings,
    )
    title = f"Add {run.profile.module_class_name}: a chunked loss generated from {request.target}"
    return run_outcome(run, title, run.profile.loss_name)


def verify_branch(request: Request, progress: Progress) -> list[GateResult]:
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
    return verify.verify(request.checkout, name, paths, out_dir, progress)


PIPELINE = Pipeline(
    understand, act_verify, profile_table, USAGE, validate_settings=validate_settings, verify_branch=verify_branch
)
