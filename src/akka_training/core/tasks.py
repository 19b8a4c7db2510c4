"""Tasks: work the service has done on the cluster that is not a training run (a merge of an
adapter into its base model today; evaluations and re-grading later).

A task is one job on the cluster backend, started by the controller like a run's attempt but
with its own spec (`TaskSpec`, written to ``task.json`` beside it), its own token (scoped to
the task, in ``AKKA_TASK_TOKEN``) and its own reports, posted to
``/v1/tasks/{task}/reports/{kind}``: `started`, `progress` (as often as it likes), and one end
report, `finished` with its result or `failed` with a sentence for the user. Each answer is a
`TaskDirective`: carry on, or stop (the task was cancelled). A task needs no devices: it holds
no claim, runs on the CPUs of a node of its pool, and never runs inside the service.

Each kind of task has its parameters and result here (`MergeParams`, `MergeResult`), its job
code in `akka_training.engines.tasks`, and its requests in the service.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from akka_training.core.plans import PlanModel
from akka_training.core.reports import Placement
from akka_training.core.resolved import BaseModelPin
from akka_training.core.storage import S3Options

TOKEN_ENV = "AKKA_TASK_TOKEN"
TaskAction = Literal["continue", "stop"]


class TaskSpec(PlanModel):
    """Everything a task's job is started with. The token travels in the environment."""

    task_id: str
    kind: str
    project: str
    run_id: str | None = None  # the run the task concerns, if any
    trainer_url: str
    storage_url: str
    # How to reach an S3 store (the credentials travel in the job's environment).
    storage_s3: S3Options = Field(default_factory=S3Options)
    params: dict[str, Any] = Field(default_factory=dict)


# --- reports -----------------------------------------------------------------------------------


class TaskStartedReport(PlanModel):
    placement: Placement


class TaskProgressReport(PlanModel):
    """What the task is doing now, for the user who waits on it: ``loading the base model``,
    ``uploading`` with `done` of `total` (bytes, files, rows: the task's own unit)."""

    message: str
    done: float | None = None
    total: float | None = None


class TaskFinishedReport(PlanModel):
    result: dict[str, Any] = Field(default_factory=dict)


class TaskFailedReport(PlanModel):
    """`message`: the sentence for the user (what could not be done and what to change);
    `detail`: anything that helps beyond it (the error, a traceback's last line)."""

    message: str
    detail: str | None = None


TASK_REPORTS: dict[str, type[PlanModel]] = {
    "started": TaskStartedReport,
    "progress": TaskProgressReport,
    "finished": TaskFinishedReport,
    "failed": TaskFailedReport,
}


# --- the merge ---------------------------------------------------------------------------------

MERGE = "merge"


class FileDigest(PlanModel):
    path: str  # relative to the directory it belongs to, slash-separated
    bytes: int
    sha256: str


class MergeParams(PlanModel):
    """Merge the adapter under `weights` into `base_model` (`merge_and_unload`) and store the
    full model, its config and its tokenizer (from `tokenizer`, else the base model's) under
    `output`."""

    base_model: BaseModelPin
    weights: str
    tokenizer: str | None = None
    output: str
    snapshot: str | None = None


class MergeResult(PlanModel):
    output: str
    files: list[FileDigest]


def base_model_unavailable(model_id: str, path: str, where: str, run_id: str | None) -> str:
    """Why a merge cannot run: the cluster cannot read the base model's weights. `where` names
    the place that looked (``this host``, ``node gpu-3``)."""
    download = f"akka training runs download {run_id}" if run_id else "akka training runs download"
    return (
        f"The base model {model_id}'s weights are not available to the training cluster "
        f"({where} has no model at {path}), so the adapter cannot be merged into it there. "
        f"Download the adapter instead (`{download}`) and merge it where the base model is, "
        "or make the model's directory readable on the cluster's nodes."
    )
