"""What a task's function receives (`TaskContext`) and how it fails (`TaskError`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from akka_training.blobstore import BlobStore
from akka_training.core.reports import Placement
from akka_training.core.tasks import TaskSpec
from akka_training.engines.tasks.reporter import TaskReporter


class TaskError(Exception):
    """The task cannot do its work: `message` is the sentence the user reads (what could not be
    done and what to change), `detail` what helps beyond it."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


@dataclass
class TaskContext:
    spec: TaskSpec
    reporter: TaskReporter
    store: BlobStore
    # The task's job directory (the working directory): local files go under it.
    workdir: Path
    # Where the job runs (pod, node, devices), as its started report said.
    placement: Placement | None = None

    def progress(self, message: str, done: float | None = None, total: float | None = None) -> None:
        """Tell the user what the task does now; raises `TaskCancelled` when it was cancelled."""
        self.reporter.progress(message, done, total)
