"""Evaluations: an adapter (or a base model) scored on a held-out dataset
(`core.evaluations`), as users read them, and their scored samples."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from akka_training.api.base import ResponseBody, Timestamp, optional_key
from akka_training.api.runs import Queue
from akka_training.api.tasks import TaskProgress
from akka_training.core.evaluations import EvaluationPlan

__all__ = [
    "EvaluationComparison",
    "EvaluationDryRun",
    "EvaluationPlan",
    "EvaluationRecord",
    "EvaluationSamples",
    "MetricComparison",
    "MetricValue",
]


class MetricValue(ResponseBody):
    name: str
    kind: str = Field(description="match, regex, length, judge, http, rule, loss or pass@k.")
    mean: float
    low: float = Field(description="The low end of the 95% confidence interval.")
    high: float = Field(description="The high end of the 95% confidence interval.")
    stderr: float = Field(description="The standard error the interval came from.")
    count: int = Field(description="Values averaged: samples, or prompts (loss, pass@k).")
    reference: str | None = optional_key(
        "preference: what the margins were measured against: the base model, run RUN (its "
        "final adapter) or run RUN snapshot NAME."
    )


class EvaluationSource(ResponseBody):
    run: str
    snapshot: str | None = None


class EvaluationRecord(ResponseBody):
    id: str
    project: str
    name: str | None
    state: str = Field(description="PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED.")
    requested: str | None = Field(description="cancel, until done.")
    base_model: str
    source: EvaluationSource | None = Field(description="None: the base model alone.")
    dataset: str = Field(description="PROJECT/NAME:vN, as resolved.")
    generation: dict[str, Any]
    metrics_planned: list[dict[str, Any]] = Field(description="The plan's metrics.")
    metrics: list[MetricValue] | None = Field(description="Once SUCCEEDED.")
    sample_count: int | None
    prompts: int | None
    engine: str | None = Field(
        None,
        description="What generated the completions once SUCCEEDED: vllm or transformers "
        "(`trainer.endpoints.engine`); None for a preference evaluation, which generates none.",
    )
    pool: str
    gpus: int = Field(description="The devices it claims in its pool, like a run.")
    claim: str | None = Field(
        description="QUEUED (waiting for devices), GRANTED, or None once released."
    )
    queue: Queue | None = Field(description="Why a QUEUED evaluation waits; None otherwise.")
    progress: TaskProgress | None
    failure: str | None
    failure_detail: str | None
    created_at: Timestamp
    started_at: Timestamp | None
    ended_at: Timestamp | None


class EvaluationDryRun(ResponseBody):
    """What a dry run answers: the evaluation's resolved parameters; nothing was started."""

    dry_run: Literal[True]
    resolved: dict[str, Any]


class EvaluationSamples(ResponseBody):
    evaluation: str
    order: Literal["worst", "best"]
    total: int
    samples: list[dict[str, Any]] = Field(
        description="index, sample, prompt, completion, expected, completionTokens, "
        "finishReason, score, values (per metric), failures, explanations, loss."
    )


class MetricComparison(ResponseBody):
    name: str
    kind: str
    a: MetricValue | None = Field(description="The first evaluation's value; None if absent.")
    b: MetricValue | None
    difference: float | None = Field(None, description="b's mean minus a's.")
    beyond_noise: bool | None = Field(
        None,
        description="Whether the difference lies outside the 95% interval of a difference of "
        "two independent means.",
    )


class EvaluationComparison(ResponseBody):
    a: str
    b: str
    metrics: list[MetricComparison]
