"""The App's processes: `liger-bot serve`, `liger-bot worker`, `liger-bot replay EVENT.json`, `liger-bot scan`."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from pipelines.outcome import ExitStatus
from pipelines.outcome import PipelineError


def register(subparsers) -> None:
    serve = subparsers.add_parser(
        "serve", help="run the webhook server (configured by the environment, probot's names)"
    )
    serve.add_argument("--host", help="listen address (default: HOST or 0.0.0.0)")
    serve.add_argument("--port", type=int, help="listen port (default: PORT or 3000)")
    serve.set_defaults(handler=serve_command)

    worker = subparsers.add_parser("worker", help="run jobs from the queue (a separate process; run several to scale)")
    worker.add_argument("--threads", type=int, default=1, help="jobs run at once in this process (default 1)")
    worker.set_defaults(handler=worker_command)

    replay = subparsers.add_parser(
        "replay", help="run one webhook payload through the handlers (like probot's receive)"
    )
    replay.add_argument("payload", help="the payload JSON, e.g. tests/fixtures/webhooks/issue_comment.created.json")
    replay.add_argument("--event", help="X-GitHub-Event (default: the file name up to its first '.')")
    replay.add_argument(
        "--inline", action="store_true", help="also run the jobs it starts here, instead of queueing them"
    )
    replay.add_argument(
        "--local",
        metavar="DIR",
        help="offline: the local forge on this Liger-Kernel checkout stands for GitHub (no APP_ID, no network); "
        "its comments, PRs and branches land beside it, in DIR.liger-bot/",
    )
    replay.set_defaults(handler=replay_command)

    scan = subparsers.add_parser("scan", help="classify every causal LM of transformers against a target checkout")
    scan.add_argument("--repo", required=True, help="the Liger-Kernel checkout (liger-bot target fetch DIR)")
    scan.add_argument("--only", help="comma-separated model types to classify (default: all)")
    scan.add_argument("--json", action="store_true", help="print JSON rows instead of the dashboard markdown")
    scan.add_argument("--jobs", type=int, default=1, help="models classified at once, each in its own process")
    scan.add_argument(
        "--no-cache",
        action="store_true",
        help="classify every model again (default: reuse DIR.liger-bot/scan-cache.json where it was made for this "
        "target commit, transformers and liger-bot)",
    )
    scan.set_defaults(handler=scan_command)


def _runtime(env, require_secret: bool, immediate: bool = False, local: str | None = None):
    from bot.config import configure_logging
    from bot.config import load_config
    from bot.runtime import Runtime

    config = load_config(env, require_secret=require_secret)
    configure_logging(config)
    if env is os.environ:  # a real process of the App (not a test calling `program`): its files are its own
        os.umask(0o077)  # the database, the queue, the work folder: unreadable by the stage user and anyone else
    return Runtime.from_config(config, forge_for=_local_forge(local) if local else None, immediate=immediate)


def _local_forge(directory: str):
    """Every installation's forge is the local one on this checkout (Renovate's local platform)."""
    from bot.forge.local import LocalForge
    from pipelines.target import open_checkout

    forge = LocalForge(open_checkout(directory).root)
    return lambda _installation_id: forge


def serve_command(args, ui) -> ExitStatus:
    from bot.app import create_app
    from bot.server import make_server
    from bot.server import serve_until_stopped

    runtime = _runtime(ui.env, require_secret=True)
    host, port = args.host or runtime.config.host, args.port or runtime.config.port
    server = make_server(create_app(runtime), host, port, runtime.config.server_limits)
    ui.progress(
        f"listening on http://{host}:{server.effective_port}{runtime.config.webhook_path} "
        f"(waitress, queue: {runtime.queue.backend})"
    )
    serve_until_stopped(server)  # Ctrl-C or SIGTERM: a clean stop, exit status 0
    ui.progress("stopped")
    return ExitStatus.OK


def worker_command(args, ui) -> ExitStatus:
    from bot.config import hide_secrets_from_children
    from bot.worker import Worker

    if args.threads < 1:
        raise PipelineError("--threads must be at least 1")
    runtime = _runtime(ui.env, require_secret=False)
    if ui.env is os.environ:  # the target's tests, run by verify gates, inherit the environment
        hide_secrets_from_children(os.environ)
    worker = Worker(runtime)
    ui.progress(f"worker {worker.name}: queue {runtime.queue.backend}, database {runtime.store.engine.dialect.name}")
    worker.run(threads=args.threads)
    return ExitStatus.OK


def _read_payload(path: str) -> dict:
    try:
        payload = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PipelineError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise PipelineError(f"{path} is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise PipelineError(f"{path} holds no webhook payload (a JSON object)")
    return payload


def replay_command(args, ui) -> ExitStatus:
    from bot import handlers
    from bot.worker import Worker

    payload = _read_payload(args.payload)
    event = args.event or Path(args.payload).name.split(".", 1)[0]
    action = payload.get("action", "")
    if not handlers.routes_for(event, action):
        ui.result(f"{event}.{action}: no handler (the server would answer 200 and ignore it)")
        return ExitStatus.OK
    runtime = _runtime(ui.env, require_secret=False, immediate=args.inline, local=args.local)
    worker = Worker(runtime)
    runtime.queue.bind(worker.handle_delivery, worker.advance)
    delivery_id = f"replay-{uuid.uuid4()}"
    runtime.store.add_delivery(delivery_id, event, action, json.dumps(payload))
    worker.handle_delivery(delivery_id)
    delivery = runtime.store.delivery(delivery_id)
    if delivery.error:
        raise PipelineError(f"{event}.{action}: {delivery.error}")
    touched = [job for job in runtime.store.jobs() if job.updated_at >= delivery.received_at]  # `approve` goes on
    for job in touched:
        ui.result(f"job {job.id}: {job.verb} {job.target} in {job.repo}#{job.thread}: {job.state}")
    started = sum(1 for job in touched if job.created_at >= delivery.received_at)
    ui.result(f"{event}.{action}: handled ({started} job(s) started, {len(touched) - started} moved on)")
    return ExitStatus.OK


def scan_command(args, ui) -> ExitStatus:
    from bot.scan import render_dashboard
    from pipelines.autopatch.scan import cache_for
    from pipelines.autopatch.scan import iter_scan
    from pipelines.target import open_checkout

    if args.jobs < 1:
        raise PipelineError("--jobs must be at least 1")
    checkout = open_checkout(args.repo, require_clean=False)
    only = [m.strip() for m in args.only.split(",") if m.strip()] if args.only else None
    cache = None if args.no_cache else cache_for(checkout)
    rows = []
    try:
        rows.extend(iter_scan(checkout, only=only, progress=ui.progress, jobs=args.jobs, cache=cache))
    except KeyboardInterrupt:  # what was classified is shown (and cached), as the one result; the status says so
        ui.error(f"interrupted after {len(rows)} model(s)")
        _show_scan(ui, rows, args.json, render_dashboard, partial=True)
        return ExitStatus.INTERRUPTED
    _show_scan(ui, rows, args.json, render_dashboard)
    return ExitStatus.OK


def _show_scan(ui, rows, as_json: bool, render_dashboard, partial: bool = False) -> None:
    from pipelines.autopatch.scan import counts

    rows = sorted(rows, key=lambda row: row.model_type)  # causal_lms' order, whatever order the jobs finished in
    if as_json:
        ui.result(
            json.dumps({"counts": counts(rows), "models": [r.to_json() for r in rows], "partial": partial}, indent=2)
        )
    else:
        ui.result(
            ("(interrupted: the models classified so far)\n" if partial else "") + render_dashboard(rows, {}, (2, 5))
        )
