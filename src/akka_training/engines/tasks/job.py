"""A task's job: ``python -m akka_training.engines.tasks.job TASK_JSON``.

TASK_JSON holds the `TaskSpec`; ``AKKA_TASK_BOOTSTRAP`` holds the credential it exchanges for the
task's token at its start; the working directory is the task's job directory. One flow: report `started` with the placement, run the
kind's function (`TASKS`), then send the one end report: `finished` with its result, or
`failed` with the sentence of the `TaskError` it raised (any other exception is reported with
its type and message). A cancelled task stops quietly. Exit status 0 finished or cancelled,
1 failed, 2 unusable arguments.
"""

from __future__ import annotations

import importlib
import logging
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from akka_training.backends.jobfiles import remove_stored_elsewhere
from akka_training.blobstore import open_blob_store
from akka_training.core.tasks import BOOTSTRAP_ENV, TaskSpec
from akka_training.engines.entry import USAGE, exchange, read_entry
from akka_training.engines.offline import stay_offline
from akka_training.engines.tasks import TASKS
from akka_training.engines.tasks.context import TaskContext, TaskError
from akka_training.engines.tasks.reporter import TaskCancelled, TaskReporter
from akka_training.telemetry.placement import detect_placement

log = logging.getLogger("akka_training.task")

TaskFunction = Callable[[TaskContext], dict[str, Any]]


def main(argv: list[str] | None = None) -> int:
    entry = read_entry(
        argv, "akka_training.engines.tasks.job", "TASK_JSON", BOOTSTRAP_ENV, "the task"
    )
    if entry is None:
        return USAGE
    spec = TaskSpec.model_validate_json(entry.spec_json)
    token = exchange(entry, spec.trainer_url, "the task")
    if isinstance(token, int):
        return token
    reporter = TaskReporter(spec.trainer_url, spec.task_id, token)
    try:
        return run_task(spec, reporter, Path.cwd())
    finally:
        reporter.close()
        # What it wrote is stored elsewhere now (a directory its backend marked only).
        remove_stored_elsewhere(Path.cwd())


def run_task(spec: TaskSpec, reporter: TaskReporter, workdir: Path) -> int:
    """Run the task under `spec`, reporting through `reporter`; the exit status."""
    stay_offline()
    try:
        placement = detect_placement()
        reporter.started(placement)
        function = load_task(spec.kind)
        store = open_blob_store(spec.storage_url, spec.storage_s3, where="job")
        task = TaskContext(spec, reporter, store, workdir, placement)
        result = function(task)
    except TaskCancelled:
        log.warning("the task was cancelled; stopping")
        return 0
    except TaskError as exc:
        log.error("task %s failed: %s", spec.task_id, exc.message)
        return _failed(reporter, exc.message, exc.detail)
    except Exception as exc:
        log.exception("task %s failed", spec.task_id)
        first = (str(exc).strip().splitlines() or [""])[0]
        message = f"the {spec.kind} task failed: {type(exc).__name__}: {first}"[:500]
        return _failed(reporter, message, traceback.format_exc()[-4000:])
    try:
        reporter.finished(result)
    except TaskCancelled:
        return 0
    return 0


def load_task(kind: str) -> TaskFunction:
    path = TASKS.get(kind)
    if path is None:
        raise TaskError(
            f"this job knows no task {kind!r} (it runs {', '.join(sorted(TASKS))}): the "
            "cluster's akka-training is older than the service's"
        )
    module, name = path.split(":")
    function: TaskFunction = getattr(importlib.import_module(module), name)
    return function


def _failed(reporter: TaskReporter, message: str, detail: str | None) -> int:
    try:
        reporter.failed(message, detail)
    except TaskCancelled:
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
