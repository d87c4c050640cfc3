"""A `liger-bot worker` process for the kill test: the real Worker and huey consumer, with the pipeline boundary
set to `small_pipeline` and the file-backed recording forge (so a restarted worker sees what GitHub would).

Usage: python -m tests.bot.worker_process TMP_DIR REMOTE_GIT STATE_JSON
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from bot.gitops import GitWorkspace
from bot.jobs import Store
from bot.queue import make_queue
from bot.runtime import Runtime
from bot.worker import Worker
from pipelines.autopatch.job import autopatch_pipeline
from tests.bot import small_pipeline
from tests.bot.app_fixtures import app_config
from tests.bot.fakes import RecordingForge


def main(tmp: str, remote: str, state: str) -> None:
    logging.basicConfig(level=logging.INFO)
    config = app_config(Path(tmp), lease_seconds=1.0)
    forge = RecordingForge(Path(remote), Path(state))
    runtime = Runtime(config, Store(config.database_url), make_queue(sqlite_path=config.queue_path), lambda _id: forge)
    runtime.workspace = GitWorkspace(config.work_dir)
    worker = Worker(runtime)
    worker.pipelines["autopatch"] = autopatch_pipeline(small_pipeline.understand, small_pipeline.run_pipeline)
    worker.run()


if __name__ == "__main__":
    main(*sys.argv[1:4])
