"""Regrades: a run's kept rollouts scored again with another reward definition, as a task on
the cluster (`core.tasks.RegradeParams`); the task's result is a `RegradeResult`."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from akka_training.api.base import RequestBody, ResponseBody, optional_key
from akka_training.api.tasks import TaskRecord

__all__ = ["PipelinePreview", "PreviewRequest", "RegradeRequest", "StagePreview"]


class RegradeRequest(RequestBody):
    reward: dict[str, Any] = Field(
        description="The new reward definition, as a plan's config.reward holds it (terms, "
        "maxConcurrency)."
    )
    from_step: int | None = Field(None, ge=0, description="The first step to regrade.")
    to_step: int | None = Field(None, ge=0, description="The last step to regrade.")


class PreviewRequest(RequestBody):
    plan: dict[str, Any] = Field(
        description="The run plan (POST /v1/previews) or pipeline plan (POST "
        "/v1/previews/pipelines) whose reward is previewed."
    )
    rows: int = Field(8, ge=1, le=1000, description="How many dataset rows to score.")


class StagePreview(ResponseBody):
    """One train stage of a pipeline's preview: its preview task, or why it has none."""

    name: str
    method: str
    task: TaskRecord | None = optional_key("The stage's preview task (a grpo or gspo stage).")
    omitted: str | None = optional_key("Why the stage is not previewed.")


class PipelinePreview(ResponseBody):
    stages: list[StagePreview]
