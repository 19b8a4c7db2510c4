"""Pipelines: ended and resumed only through `move_pipeline`, under the named rules of
`core.states.PIPELINE_RULES`, over the state as stored. A stage has no state of its own (its
run's phase, or its evaluation's task state)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from akka_training.core.rules import MovedMeanwhile
from akka_training.core.states import PIPELINE_RULES, PipelineRule, PipelineState
from akka_training.storage.models import Pipeline
from akka_training.storage.transitions.rows import compare_and_set, locked


def lock_pipeline(session: Session, pipeline_id: str) -> Pipeline | None:
    """The pipeline as stored, locked until this transaction ends (None if there is none)."""
    return locked(session, Pipeline, pipeline_id, Pipeline.state)


def move_pipeline(
    session: Session,
    pipeline: Pipeline,
    rule: PipelineRule,
    *,
    failure: str | None = None,
    now: datetime | None = None,
) -> PipelineState:
    """Apply the named rule to `pipeline`: an end keeps `failure` (why it did not complete) and
    its time; RESUME clears both. Raises `IllegalTransition` (a `Conflict`) when the rule does
    not move a pipeline from its state, `MovedMeanwhile` when it changed since it was read."""
    now = now or datetime.now(UTC)
    new = PIPELINE_RULES.target(pipeline.state, rule, f"Pipeline {pipeline.id}")
    ended = new != PipelineState.RUNNING
    values: dict[str, Any] = {
        "state": new.value,
        "failure": failure if ended else None,
        "ended_at": now if ended else None,
    }
    if not compare_and_set(session, pipeline, {"state": pipeline.state}, values):
        raise MovedMeanwhile(
            f"Pipeline {pipeline.id} is now {pipeline.state}: it changed while this was being "
            f"decided, and the rule {rule.value!r} was not applied."
        )
    return new
