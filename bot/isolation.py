"""Pipeline stages in a child process: the target repository's code never runs inside the worker.

The worker holds the App's private key, the webhook secret and installation tokens in memory; understand and
act + verify import the target's files (a fuse model file, a kernel's `path.py:function`) and run its tests. So
`isolated(pipeline, "module:NAME")` gives a Pipeline row whose two stages each run `python -m bot.isolation` in a
child: the request goes in as JSON on stdin, the child runs the named in-process row's stage, and its answer
comes back as JSON in a result file. The child's environment is the allow-list of `pipelines.subprocesses` (never the
App's variables) and its directory the job's checkout.

When the worker runs as root the child also runs as another, unprivileged OS user (`LIGER_BOT_STAGE_USER`, default
`nobody`) with no supplementary groups and umask 077: it owns the job's checkout, its out folder and a scratch home,
and nothing else, so it cannot read the key file (0400), the database or the queue (the worker makes them 0600) or
the worker's /proc/<pid>/environ. A worker that is not root cannot switch users: it says so in its log once, and
its children, with the allow-listed environment only, could still read what the worker's user can read.

Progress crosses on a pipe of its own, one JSON object a line (`{"progress": text}` or `{"gate": record}`); the
parent forwards each to the worker's callback (the status comment), and a callback that raises (the job was
cancelled) kills the child. What the child prints (the target's own output included) goes to a log file whose tail
is the crash report: nothing the target prints on stdout or stderr can pass for progress.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

from pipelines import registry
from pipelines.contract import Outcome
from pipelines.contract import Pipeline
from pipelines.contract import Progress
from pipelines.contract import Request
from pipelines.contract import Understood
from pipelines.outcome import GateResult
from pipelines.outcome import PipelineError
from pipelines.pull_request import BodyParts
from pipelines.subprocesses import allowed_env
from pipelines.target import Checkout

SOURCE_ROOT = Path(__file__).resolve().parents[1]  # liger-bot's own packages, importable in the child
STAGE_USER_VARIABLE = "LIGER_BOT_STAGE_USER"
# The interpreter the child runs (default: the worker's). The stage user must be able to run it and read
# liger-bot's packages: a Python installed under root's home is out of its reach (README: "Stage isolation").
STAGE_PYTHON_VARIABLE = "LIGER_BOT_STAGE_PYTHON"
DEFAULT_STAGE_USER = "nobody"
MAX_RESULT_BYTES = 64 * 1024 * 1024
log = logging.getLogger(__name__)
_warned_same_user = False


class StageCrashed(RuntimeError):
    """The stage's process failed with something other than a PipelineError (a bug, a crash, a kill)."""


def isolated(pipeline: Pipeline, name: str) -> Pipeline:
    """`pipeline` with understand and act + verify run in a child; `name` ("module:NAME") finds it there."""
    return dataclasses.replace(
        pipeline,
        understand=lambda request: understood_from_json(run_stage(name, "understand", request, _ignore)),
        act_verify=lambda request, progress: outcome_from_json(run_stage(name, "act_verify", request, progress)),
    )


def in_child(name: str) -> Pipeline:
    """The registry's pipeline `name` as the worker runs it: each stage in a child, away from the App's secrets."""
    return isolated(registry.pipeline(name), registry.location(name))


def _ignore(_event) -> None:
    pass


# --- who the child runs as -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageUser:
    name: str
    uid: int
    gid: int

    def popen_kwargs(self) -> dict:
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "umask": 0o077}

    def hand_over(self, *folders: Path) -> None:
        """Make `folders` (created if missing) the child's own; links inside are re-owned, never followed."""
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            os.chown(folder, self.uid, self.gid, follow_symlinks=False)
            for parent, dirs, files in os.walk(folder):
                for name in dirs + files:
                    os.chown(os.path.join(parent, name), self.uid, self.gid, follow_symlinks=False)


def stage_user() -> StageUser | None:
    """The user stage children run as, or None where this process cannot switch (it is not root)."""
    global _warned_same_user
    if os.geteuid() != 0:
        if not _warned_same_user:
            _warned_same_user = True
            log.warning(
                "the worker is not root: stage children run as its own user with the allow-listed environment only; "
                "they could read files that user can read (key file, database) and its /proc. Run the worker as "
                "root (children switch to %s=%s) or as a user that holds nothing but the job's work folder",
                STAGE_USER_VARIABLE,
                DEFAULT_STAGE_USER,
            )
        return None
    name = os.environ.get(STAGE_USER_VARIABLE) or DEFAULT_STAGE_USER
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise PipelineError(f"{STAGE_USER_VARIABLE}={name}: no such user", hint="create it, or name another") from None
    if entry.pw_uid == 0:
        raise PipelineError(f"{STAGE_USER_VARIABLE}={name} is root: target code never runs as root")
    return StageUser(name, entry.pw_uid, entry.pw_gid)


# --- the parent side ----------------------------------------------------------------------------------------


def child_env(home: Path | None = None) -> dict[str, str]:
    env = allowed_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE_ROOT), env.get("PYTHONPATH", "")]))
    if home is not None:  # its own home and temp folder: caches (triton, inductor) land where it may write
        env |= {"HOME": str(home), "TMPDIR": str(home / "tmp")}
    return env


def _child_folders(request: Request) -> list[Path]:
    """What the child writes: the checkout, the report beside it (`<checkout>.liger-bot`) and the out folder."""
    root = request.checkout.root
    folders = [root, root.parent / f"{root.name}.liger-bot"]
    return folders + ([request.out_dir] if request.out_dir else [])


def run_stage(name: str, stage: str, request: Request, progress: Progress) -> dict:
    """Run `stage` of the pipeline row `name` in a child; its JSON answer, or the PipelineError it raised."""
    job = {"pipeline": name, "stage": stage, "request": request_json(request)}
    user = stage_user()
    with tempfile.TemporaryDirectory(prefix="liger-bot-stage-") as scratch:
        own = Path(scratch) / "own"  # the child's: its result, its home; the log stays the parent's
        (own / "home" / "tmp").mkdir(parents=True)
        result_file, log_file = own / "result.json", Path(scratch) / "output.log"
        switch = {}
        if user is not None:
            os.chmod(scratch, 0o711)
            user.hand_over(own, *_child_folders(request))
            switch = user.popen_kwargs()
        events_read, events_write = os.pipe()
        # -P: the checkout (the child's cwd) is not put on sys.path, so it cannot stand in for liger-bot's modules
        python = os.environ.get(STAGE_PYTHON_VARIABLE) or sys.executable
        argv = [python, "-P", "-m", "bot.isolation", str(result_file), str(events_write)]
        with log_file.open("w") as log, _unrunnable(python, user):
            proc = subprocess.Popen(
                argv,
                cwd=request.checkout.root,
                env=child_env(own / "home"),
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(events_write,),
                text=True,
                start_new_session=True,  # its own process group: a cancel stops the target's tests it started too
                **switch,
            )
        os.close(events_write)  # the child holds the only writer: its exit ends the stream
        try:
            proc.stdin.write(json.dumps(job))
            proc.stdin.close()
            with os.fdopen(events_read) as events:
                for line in events:
                    progress(_event_from_json(json.loads(line)))
            returncode = proc.wait()
        finally:
            if proc.poll() is None:  # the callback raised (a cancelled job): stop the stage now
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return _answer(result_file, returncode, _tail(log_file), stage)


@contextlib.contextmanager
def _unrunnable(python: str, user: StageUser | None):
    """A stage user that cannot run the interpreter is a deployment error: say which, and what to do."""
    try:
        yield
    except PermissionError as error:
        who = f"the stage user {user.name}" if user else "this user"
        raise PipelineError(
            f"{who} cannot reach {error.filename or python}",
            hint=f"install Python and liger-bot where {who} can read them, or point {STAGE_PYTHON_VARIABLE} at one",
        ) from None


def _tail(log_file: Path, lines: int = 15) -> str:
    return "\n".join(log_file.read_text(errors="replace").splitlines()[-lines:])


def _event_from_json(event: dict):
    return GateResult.from_record(event["gate"]) if "gate" in event else str(event["progress"])


def _read_result(result_file: Path) -> dict:
    """The child's answer file, read as data: never through a link it left there, never without bound."""
    try:
        descriptor = os.open(result_file, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(MAX_RESULT_BYTES + 1)
    try:
        answer = json.loads(data) if len(data) <= MAX_RESULT_BYTES else {}
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _answer(result_file: Path, returncode: int, tail: str, stage: str) -> dict:
    answer = _read_result(result_file)
    if "refused" in answer:
        raise PipelineError(answer["refused"]["message"], hint=answer["refused"].get("hint", ""))
    if "ok" in answer and returncode == 0:
        return answer["ok"]
    why = answer.get("crashed") or f"exited {returncode}"
    raise StageCrashed(f"the {stage} stage's process failed: {why}\n{tail}".strip())


# --- JSON both ways -----------------------------------------------------------------------------------------


def request_json(request: Request) -> dict:
    return {
        "root": str(request.checkout.root),
        "target": request.target,
        "settings": list(request.settings),
        "options": dict(request.options),
        "out_dir": str(request.out_dir) if request.out_dir else None,
    }


def request_from_json(data: dict) -> Request:
    out_dir = Path(data["out_dir"]) if data.get("out_dir") else None
    checkout = Checkout(Path(data["root"]))  # validated by the parent, which made it
    return Request(checkout, data["target"], tuple(data["settings"]), dict(data["options"]), out_dir)


def understood_json(understood: Understood) -> dict:
    return {**dataclasses.asdict(understood), "needs_review": list(understood.needs_review)}


def understood_from_json(data: dict) -> Understood:
    return Understood(data["profile"], data["branch"], tuple(data.get("needs_review") or ()), data.get("summary", ""))


def outcome_json(outcome: Outcome) -> dict:
    gates, pr = [g.to_record() for g in outcome.gates], outcome.pr.to_json() if outcome.pr else None
    return {**dataclasses.asdict(outcome), "gates": gates, "pr": pr}


def outcome_from_json(data: dict) -> Outcome:
    gates = [GateResult.from_record(g) for g in data["gates"]]
    return Outcome(**{**data, "gates": gates, "pr": BodyParts.from_json(data["pr"]) if data.get("pr") else None})


# --- the child side -----------------------------------------------------------------------------------------


def _emitter(events):
    def emit(event) -> None:
        record = {"gate": event.to_record()} if isinstance(event, GateResult) else {"progress": str(event)}
        events.write(json.dumps(record) + "\n")
        events.flush()

    return emit


def run_child(job: dict, emit) -> dict:
    pipeline, request = registry.resolve(job["pipeline"]), request_from_json(job["request"])
    try:
        if job["stage"] == "understand":
            return {"ok": understood_json(pipeline.understand(request))}
        return {"ok": outcome_json(pipeline.act_verify(request, emit))}
    except PipelineError as exc:
        return {"refused": {"message": exc.message, "hint": exc.hint}}
    except Exception as exc:
        traceback.print_exc()
        return {"crashed": f"{exc.__class__.__name__}: {exc}"[:1000]}


def main(argv: list[str]) -> int:
    result_file = Path(argv[0])
    with os.fdopen(int(argv[1]), "w") as events:
        answer = run_child(json.loads(sys.stdin.read()), _emitter(events))
    result_file.write_text(json.dumps(answer))
    return 0 if "crashed" not in answer else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
