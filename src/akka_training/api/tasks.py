"""Tasks: jobs the trainer runs on its cluster that are not training runs (a merge of an
adapter into its base model), as users follow them, and what their jobs report
(`core.tasks`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from akka_training.api.base import ResponseBody, Timestamp, optional_key
from akka_training.core.tasks import TASK_REPORTS, TaskAction

__all__ = ["TASK_REPORTS", "TaskDirective", "TaskProgress", "TaskRecord"]


class TaskProgress(ResponseBody):
    message: str = Field(description="What the task does now.")
    done: float | None = Field(description="How much of `total` is done, in the task's unit.")
    total: float | None


class TaskRecord(ResponseBody):
    id: str
    kind: str = Field(
        description="merge, regrade, preview, evaluate, verify or serve (an endpoint)"
    )
    project: str
    run: str | None = Field(description="The run the task concerns.")
    state: str = Field(description="PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED.")
    requested: str | None = Field(description="cancel, until done.")
    pool: str
    progress: TaskProgress | None
    result: dict[str, Any] | None = Field(description="What a SUCCEEDED task made.")
    failure: str | None = Field(description="Why a FAILED task failed, for a person.")
    failure_detail: str | None
    created_at: Timestamp
    started_at: Timestamp | None
    ended_at: Timestamp | None


class TaskDirective(ResponseBody):
    """continue, or stop (the task was cancelled)."""

    action: TaskAction
    params: dict[str, Any] | None = optional_key(
        "A long-lived task's parameters as they are now (an endpoint's adapters change)."
    )
