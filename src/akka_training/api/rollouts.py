"""The rollouts a reinforcement run kept: one step at a time."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from akka_training.api.base import ResponseBody, optional_key


class Rollout(ResponseBody):
    step: int
    index: int = Field(description="Position within the step's batch.")
    group: int = Field(description="The prompt's index within the step; its rollouts share it.")
    prompt: str | list[dict[str, Any]] = Field(description="The chat messages, or the prompt.")
    completion: str
    expected: str | None
    score: float
    shares: dict[str, float] = Field(description="Each term's weighted share; they sum to score.")
    values: dict[str, float] = Field(description="Each term's raw value.")
    completion_tokens: int
    finish_reason: str = Field(description="stop, or length (hit maxCompletionTokens).")
    tool_calls: int
    tool_failures: int
    failures: dict[str, str] = Field(description="Term -> why it could not score (scored 0).")
    explanations: dict[str, str]
    weights: dict[str, float]


class StepRollouts(ResponseBody):
    """One step's rollouts (at most 200), with the list of steps that kept rollouts."""

    run: str
    method: str
    steps: list[int]
    step: int | None = Field(description="None: the run kept no rollouts (see note).")
    count: int = Field(description="How many rollouts the step kept.")
    order: str | None = Field(description="worst, best, or None: in order.")
    best: float | None
    worst: float | None
    rollouts: list[Rollout]
    note: str | None = optional_key("Why there are no rollouts.")
