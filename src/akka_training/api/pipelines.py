"""Pipelines: ordered train stages, each a run linked to the pipeline; their dry runs and the
lines `pipelines wait` streams. The plan a pipeline starts from is `core.plans.PipelinePlan`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from akka_training.api.base import ResponseBody, Timestamp, flag_key, optional_key
from akka_training.api.runs import Progress
from akka_training.core.plans import PipelinePlan

__all__ = [
    "Pipeline",
    "PipelineDryRun",
    "PipelineEndLine",
    "PipelinePlan",
    "PipelineProgressLine",
    "PipelineStage",
    "PipelineWaitLine",
    "StageCheck",
]


class PipelineStage(ResponseBody):
    name: str
    type: str = Field(description="train or evaluate.")
    method: str = Field(description="The train stage's method, or evaluate.")
    run: str | None = Field(
        description="The stage's latest run (an evaluate stage's evaluation); None until it starts."
    )
    phase: str = Field(
        description="The run's phase (an evaluation's state); WAITING before it starts, "
        "NOT_STARTED when the pipeline ended before it."
    )
    progress: Progress | None


class Pipeline(ResponseBody):
    id: str
    project: str
    name: str | None
    description: str | None
    state: str = Field(description="RUNNING, COMPLETED, FAILED or CANCELLED.")
    failure: str | None
    created_at: Timestamp
    ended_at: Timestamp | None
    stages: list[PipelineStage]
    existing: bool = flag_key("True: a pipeline with the plan's submissionId existed; this is it.")


class StageCheck(ResponseBody):
    """One stage of a pipeline's dry run."""

    name: str
    type: str
    omitted: str | None = optional_key("Why the stage's settings cannot be resolved yet.")
    source_stage: str | None = optional_key("The earlier stage whose adapter it starts from.")
    settings: dict[str, Any] | None = optional_key("As RunRecord.settings.")


class PipelineDryRun(ResponseBody):
    dry_run: Literal[True]
    project: str
    stages: list[StageCheck]


class PipelineProgressLine(ResponseBody):
    """The pipeline, each time one of its stages changes."""

    type: Literal["progress"]
    pipeline: Pipeline


class PipelineEndLine(ResponseBody):
    """The last line: the pipeline once it ended, or at the timeout."""

    type: Literal["pipeline"]
    timed_out: bool
    pipeline: Pipeline


PipelineWaitLine = Annotated[PipelineProgressLine | PipelineEndLine, Field(discriminator="type")]
