"""A toy pipeline: everything adding a pipeline takes is its folder (this one) and one line of pipelines.registry.

`/liger toy NAME` (or `liger-bot verify --pipeline toy --target NAME`) writes and checks `toy/NAME.txt` on
`liger-bot/toy-NAME`. Nothing in bot/ names it: the command table, the worker's job flow (its stages in the child
of bot.isolation, found again by the registry's `module:ATTRIBUTE`) and `liger-bot verify` read the registry.
"""

from __future__ import annotations

from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Progress
from pipelines.contract import Request
from pipelines.contract import Understood
from pipelines.contract import Usage
from pipelines.contract import branch_name
from pipelines.contract import field_table
from pipelines.outcome import GateResult
from pipelines.outcome import GateStatus
from pipelines.outcome import hard_failure
from pipelines.pull_request import BodyParts

LOCATION = "tests.pipelines.toy.job:PIPELINE"  # the registry line's value
USAGE = Usage("NAME", "write `toy/NAME.txt` (a test's pipeline) and open a draft PR", target="kernel name")
GREETING = "hello from the toy pipeline\n"


def _path(name: str) -> str:
    return f"toy/{name}.txt"


def profile_table(profile: dict) -> str:
    return field_table(profile, ("name", "greeting"))


def understand(request: Request) -> Understood:
    profile = {"name": request.target, "greeting": GREETING.strip()}
    return Understood(profile, branch_name("toy", request.target))


def verify_branch(request: Request, progress: Progress) -> list[GateResult]:
    path = request.checkout.path(_path(request.target))
    progress(f"verify: toy {request.target}")
    ok = path.is_file() and path.read_text() == GREETING
    gate = GateResult("toy file", GateStatus.PASS if ok else GateStatus.FAIL, _path(request.target))
    progress(gate)
    return [gate]


def act_verify(request: Request, progress: Progress) -> Outcome:
    branch, relative = branch_name("toy", request.target), _path(request.target)
    git = request.checkout.git
    git.checkout(branch, create_from="HEAD")
    request.checkout.path(relative).parent.mkdir(parents=True, exist_ok=True)
    request.checkout.path(relative).write_text(GREETING)
    git.commit_all(f"toy: {request.target}")
    gates = verify_branch(request, progress)
    return Outcome(
        branch=branch,
        gates=gates,
        files=[relative],
        pr_title=f"toy: {request.target}",
        pr=BodyParts(
            f"A toy file for `{request.target}`.",
            reproduce=f"liger-bot verify --pipeline toy --target {request.target}",
        ),
        ok=not hard_failure(gates),
        profile=request.profile or understand(request).profile,
        verify_target=request.target,
    )


PIPELINE = Pipeline(understand, act_verify, profile_table, USAGE, verify_branch=verify_branch)
