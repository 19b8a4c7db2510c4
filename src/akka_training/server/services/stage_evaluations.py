"""A pipeline's evaluate stages (`core.plans.EvaluateStage`): checked with the pipeline, started
as an evaluation of the final adapter of the train stage they name once it completes, and their
gate decided when the evaluation succeeds. An evaluation belongs to its stage by its task's
`key` (``pipeline:ID:STAGE``)."""

from __future__ import annotations

from sqlalchemy import desc, select
from sqlalchemy.orm import Session

from akka_training.api.pipelines import StageCheck
from akka_training.core.errors import AkkaError, PlanRefused, Problem
from akka_training.core.evaluations import (
    EVALUATE,
    EvaluationResult,
    EvaluationSource,
    parse_evaluation,
)
from akka_training.core.plans import EvaluateStage, PipelinePlan, TrainStage
from akka_training.core.refs import stage_of
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.services import evaluations
from akka_training.storage.ids import new_id
from akka_training.storage.models import Pipeline, Task


def stage_key(pipeline_id: str, stage: str) -> str:
    return f"pipeline:{pipeline_id}:{stage}"


def source_stage(plan: PipelinePlan, index: int) -> TrainStage | None:
    """The earlier train stage an evaluate stage's `source` names, if it names one."""
    stage = plan.stages[index]
    assert isinstance(stage, EvaluateStage)
    name = stage_of(stage.source)
    for earlier in plan.stages[:index]:
        if earlier.name == name and isinstance(earlier, TrainStage):
            return earlier
    return None


def check(
    session: Session, ctx: AppContext, principal: Principal, plan: PipelinePlan, index: int
) -> tuple[StageCheck, list[Problem]]:
    """The dry run's entry of an evaluate stage and its problems (fields under stages[i])."""
    stage = plan.stages[index]
    assert isinstance(stage, EvaluateStage)
    field = f"stages[{index}]"
    entry = StageCheck(name=stage.name, type=stage.type)
    producer = source_stage(plan, index)
    if producer is None:
        trains = [s.name for s in plan.stages[:index] if isinstance(s, TrainStage)]
        return entry, [
            Problem(
                f"{field}.source",
                f"stage {stage.name}: source {stage.source!r} names no earlier train stage; set "
                f"it to @STAGE, one of: {', '.join('@' + n for n in trains) or 'none'}.",
            )
        ]
    entry.source_stage = producer.name
    try:
        evaluation = parse_evaluation(stage.evaluation_document(plan.project, producer.base_model))
        checked = evaluations.check(session, ctx, principal, evaluation, "ev-dry-run")
    except PlanRefused as refused:
        return entry, [
            Problem(f"{field}.{p.field}", f"stage {stage.name}: {p.message}")
            for p in refused.problems
        ]
    problems: list[Problem] = []
    names = [m.name for m in evaluation.metrics]
    if stage.gate is not None and stage.gate.metric not in names:
        problems.append(
            Problem(
                f"{field}.gate.metric",
                f"stage {stage.name}: gate.metric {stage.gate.metric!r} is none of the stage's "
                f"metrics ({', '.join(names)}).",
            )
        )
    resolved = checked.params.to_json()
    resolved.pop("samples", None)
    if stage.gate is not None:
        resolved["gate"] = {"metric": stage.gate.metric, "min": stage.gate.min}
    entry.settings = resolved
    return entry, problems


def latest(session: Session, pipeline_id: str, stage: str) -> Task | None:
    return session.scalar(
        select(Task)
        .where(Task.kind == EVALUATE, Task.key == stage_key(pipeline_id, stage))
        .order_by(desc(Task.created_at))
        .limit(1)
    )


def start(
    session: Session,
    ctx: AppContext,
    pipeline: Pipeline,
    plan: PipelinePlan,
    index: int,
    done: dict[str, str],
) -> str | None:
    """Start the evaluation of an evaluate stage; the reason it could not start, if it could
    not."""
    stage = plan.stages[index]
    assert isinstance(stage, EvaluateStage)
    producer = source_stage(plan, index)
    assert producer is not None  # checked when the pipeline started
    document = stage.evaluation_document(plan.project, producer.base_model)
    principal = Principal("controller", "controller", "admin", None)
    evaluation_id = new_id("ev")
    try:
        evaluation = parse_evaluation(document)
        evaluation.source = EvaluationSource(run=done[producer.name])
        checked = evaluations.check(session, ctx, principal, evaluation, evaluation_id)
    except AkkaError as exc:
        return f"stage {stage.name} could not start: {exc.message}"
    evaluations.create(
        session, evaluation, checked, evaluation_id, stage_key(pipeline.id, stage.name)
    )
    return None


def gate_failure(stage: EvaluateStage, task: Task) -> str | None:
    """Why a succeeded evaluation's gate stops the pipeline, or None when it passes."""
    if stage.gate is None:
        return None
    result = EvaluationResult.model_validate(task.result)
    value = next((m.mean for m in result.metrics if m.name == stage.gate.metric), None)
    if value is not None and value >= stage.gate.min:
        return None
    shown = "absent" if value is None else f"{value:.4g}"
    return (
        f"stage {stage.name} (evaluation {task.id}): the gate did not pass: metric "
        f"{stage.gate.metric} is {shown}, below the minimum {stage.gate.min:g}. Resuming the "
        f"pipeline runs the same evaluation of the same adapter (stage {stage_of(stage.source)}) and "
        "fails again: start a new pipeline with that stage changed, or with a lower gate.min"
    )
