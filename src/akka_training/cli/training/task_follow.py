"""Following a task (a merge, a regrade) from the command that asked for it: one progress line
per change on stderr, and the task's end as the command's, in one sentence."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from akka_training.cli.state import state
from akka_training.core.errors import AkkaError

if TYPE_CHECKING:
    from akka_training.api.tasks import TaskProgress, TaskRecord
    from akka_training.client import TrainerClient


def follow_task(
    client: TrainerClient,
    task: TaskRecord,
    what: str,
    timeout: float,
    amount: Callable[[TaskProgress], str],
    again: str = "",
) -> TaskRecord:
    """Wait for `task` (`what`: "The merge of run R"), printing its progress (`amount` says how
    far a RUNNING task is); the succeeded task, or an error naming how it ended."""
    for update in client.wait_task(task.id, timeout=timeout):
        task = update
        _say_progress(update, amount)
    if task.state == "SUCCEEDED":
        return task
    if task.state in ("FAILED", "CANCELLED"):
        reason = task.failure or f"the task was {task.state}"
        raise AkkaError(f"{what} {task.state} (task {task.id}): {reason}")
    raise AkkaError(
        f"{what} is still {task.state} after {timeout:g} s; it goes on: "
        f"follow it with `akka training tasks get {task.id}`{again}."
    )


def _say_progress(task: TaskRecord, amount: Callable[[TaskProgress], str]) -> None:
    if state.output != "text" or state.quiet:
        return
    line = f"{task.kind} {task.id}: {task.state}"
    progress = task.progress
    if progress is not None and task.state == "RUNNING":
        line += f", {progress.message}"
        if progress.total:
            line += f" ({amount(progress)})"
    print(line, file=sys.stderr, flush=True)
