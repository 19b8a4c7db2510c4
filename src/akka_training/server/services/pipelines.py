"""Pipelines: ordered stages: train stages, each a run linked to the pipeline, and evaluate
stages, each an evaluation of an earlier stage's adapter whose gate decides whether the stages
after it start (`stage_evaluations`). A stage may name an
earlier stage's output with ``@STAGE`` as its source adapter (a warm start from that stage's final
adapter). The controller starts each stage when the one before it completes."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from sqlalchemy import desc, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from akka_training.api.pipelines import Pipeline as PipelineRecord
from akka_training.api.pipelines import (
    PipelineDryRun,
    PipelineEndLine,
    PipelineProgressLine,
    PipelineStage,
    StageCheck,
)
from akka_training.core.errors import AkkaError, Conflict, InvalidRequest, PlanRefused, Problem
from akka_training.core.figures import json_safe
from akka_training.core.parsing import parse_plan, salvage
from akka_training.core.phases import TERMINAL, Phase
from akka_training.core.plans import RL_METHODS, EvaluateStage, PipelinePlan, TrainStage
from akka_training.core.refs import stage_of, valid_name
from akka_training.core.rules import IllegalTransition
from akka_training.core.states import PIPELINE_RULES, PipelineRule, PipelineState, TaskState
from akka_training.core.validation import validate
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.services import evaluations, stage_evaluations
from akka_training.server.services import runs as run_service
from akka_training.server.services.lookups import locked_pipeline_for, pipeline_for
from akka_training.server.services.plans import (
    StageBinding,
    build_settings,
    check_run,
    resolve_run,
)
from akka_training.server.services.run_views import run_summary
from akka_training.server.services.stage_outputs import stage_output_dataset
from akka_training.storage.ids import new_id
from akka_training.storage.models import Pipeline, Run
from akka_training.storage.transitions import event, lock_pipeline, move_pipeline

log = logging.getLogger(__name__)


def start(
    session: Session, ctx: AppContext, principal: Principal, document: dict[str, Any], dry_run: bool
) -> PipelineRecord | PipelineDryRun:
    try:
        plan = parse_plan(document)
    except PlanRefused as refused:
        if document.get("kind") != "pipeline":
            raise
        raise _every_problem(session, ctx, principal, document, refused) from None
    if not isinstance(plan, PipelinePlan):
        raise InvalidRequest("This is a run plan; start it with `akka training runs start`.")
    principal.require(plan.project)
    if plan.submission_id and not dry_run:
        existing = session.scalar(
            select(Pipeline).where(
                Pipeline.project == plan.project, Pipeline.submission_id == plan.submission_id
            )
        )
        if existing is not None:
            return pipeline_record(session, ctx, existing, existing=True)
    stages = check_stages(session, ctx, principal, plan)
    if dry_run:
        return PipelineDryRun(dry_run=True, project=plan.project, stages=stages)
    pipeline = Pipeline(
        id=new_id("p"),
        project=plan.project,
        name=plan.name,
        description=plan.description,
        submission_id=plan.submission_id,
        plan=document,
        state=PipelineState.RUNNING,
    )
    session.add(pipeline)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict("A pipeline with this submissionId is being started.") from exc
    advance(session, ctx, pipeline)
    return pipeline_record(session, ctx, pipeline)


def check_stages(
    session: Session, ctx: AppContext, principal: Principal, plan: PipelinePlan
) -> list[StageCheck]:
    """Check every stage; the resolved settings of each stage whose dataset is registered.
    Raises `PlanRefused` with every problem of every stage."""
    problems: list[Problem] = []
    names = [s.name for s in plan.stages]
    counts = Counter(names)
    first = {name: i for i, name in reversed(list(enumerate(names)))}
    for i, name in enumerate(names):
        if not valid_name(name):
            problems.append(
                Problem(
                    f"stages[{i}].name",
                    f"stages[{i}].name {name!r} is not a name; use lower-case letters, digits, '.', '_' and '-'.",
                )
            )
        if counts[name] > 1 and first[name] == i:
            problems.append(
                Problem(
                    f"stages[{i}].name",
                    f"Stage name {name!r} is used more than once; stage names must be unique.",
                )
            )
    out = []
    for i, stage in enumerate(plan.stages):
        if isinstance(stage, EvaluateStage):
            checked_stage, more = stage_evaluations.check(session, ctx, principal, plan, i)
            problems.extend(more)
            out.append(checked_stage)
            continue
        trains = [s.name for s in plan.stages[:i] if isinstance(s, TrainStage)]
        binding = StageBinding(earlier=trains, runs={})
        checked, pins = check_run(session, ctx, principal, stage.as_run_plan(plan.project), binding)
        for p in validate(checked):
            problems.append(Problem(f"stages[{i}].{p.field}", f"stage {stage.name}: {p.message}"))
        entry = StageCheck(name=stage.name, type=stage.type)
        from_stage = checked.dataset_from_stage
        if from_stage is not None:
            producer = next(s for s in plan.stages if s.name == from_stage)
            if stage.config.method == "dpo":
                problems.append(
                    Problem(
                        f"stages[{i}].config.dataset",
                        f"stage {stage.name}: config.dataset @{from_stage} is a stage's output, "
                        "chat rows of the best completions; a dpo stage trains on preference "
                        "pairs. Use a registered preference dataset.",
                    )
                )
            elif isinstance(producer, TrainStage) and producer.config.method not in RL_METHODS:
                method = producer.config.method
                named = f"an {method}" if method == "sft" else f"a {method}"
                problems.append(
                    Problem(
                        f"stages[{i}].config.dataset",
                        f"stage {stage.name}: config.dataset @{from_stage} names {named} "
                        "stage; only "
                        "grpo and gspo stages produce a dataset (the best completion of each "
                        "prompt they scored). Use a registered dataset or a reinforcement stage.",
                    )
                )
        if from_stage is not None:
            entry.omitted = (
                f"trains on the output of stage {from_stage}, which has no registered dataset "
                "to resolve until that stage runs"
            )
        source_stage = stage_of(stage.source.run) if stage.source else None
        if source_stage:
            entry.source_stage = source_stage
        out.append(entry)
        if from_stage is None and "dataset" in pins and not problems:
            entry.settings = build_settings(ctx, checked, pins).settings.to_json()
    if problems:
        raise PlanRefused(problems, what="pipeline")
    return out


def _every_problem(
    session: Session,
    ctx: AppContext,
    principal: Principal,
    document: dict[str, Any],
    refused: PlanRefused,
) -> PlanRefused:
    """A pipeline refused for its schema, with the problems its stages' rules find in what still
    parses, so that every problem comes at once (a field that was left out adds none)."""
    plan, removed = salvage(PipelinePlan, document)
    if plan is None:
        return refused
    try:
        check_stages(session, ctx, principal, plan)
    except PlanRefused as more:
        seen = {(p.field, p.message) for p in refused.all_problems}
        extra = [
            p
            for p in more.problems
            if (p.field, p.message) not in seen
            and not any(p.field == f or p.field.startswith((f + ".", f + "[")) for f in removed)
        ]
        if extra:
            return PlanRefused([*refused.all_problems, *extra], what="pipeline")
    return refused


def advance(session: Session, ctx: AppContext, pipeline: Pipeline) -> None:
    """Start the next stage when the previous one completed; end the pipeline when a stage
    failed or was cancelled, or when every stage completed."""
    if pipeline.state != PipelineState.RUNNING:
        return
    plan = PipelinePlan.model_validate(pipeline.plan)
    done: dict[str, str] = {}
    for i, stage in enumerate(plan.stages):
        if isinstance(stage, EvaluateStage):
            if not _evaluate_stage(session, ctx, pipeline, plan, i, done):
                return
            continue
        run = latest_stage_run(session, pipeline.id, stage.name)
        if run is None:
            _start_stage(session, ctx, pipeline, plan, i, done)
            return
        if run.phase == Phase.COMPLETED:
            done[stage.name] = run.id
            continue
        if run.phase in (Phase.FAILED, Phase.CANCELLED):
            rule = PipelineRule.CANCEL if run.phase == Phase.CANCELLED else PipelineRule.FAIL
            _end(session, pipeline, rule, f"stage {stage.name} (run {run.id}) is {run.phase}")
        return
    _end(session, pipeline, PipelineRule.COMPLETE, None)


def _evaluate_stage(
    session: Session,
    ctx: AppContext,
    pipeline: Pipeline,
    plan: PipelinePlan,
    index: int,
    done: dict[str, str],
) -> bool:
    """Whether an evaluate stage is done and its gate passed; otherwise start its evaluation,
    or end the pipeline when it failed, was cancelled or its gate did not pass."""
    stage = plan.stages[index]
    assert isinstance(stage, EvaluateStage)
    task = stage_evaluations.latest(session, pipeline.id, stage.name)
    if task is None:
        reason = stage_evaluations.start(session, ctx, pipeline, plan, index, done)
        if reason is not None:
            _end(session, pipeline, PipelineRule.FAIL, reason)
        return False
    if task.state == TaskState.SUCCEEDED:
        failure = stage_evaluations.gate_failure(stage, task)
        if failure is None:
            done[stage.name] = task.id
            return True
        _end(session, pipeline, PipelineRule.FAIL, failure)
    elif task.state in (TaskState.FAILED, TaskState.CANCELLED):
        rule = PipelineRule.CANCEL if task.state == TaskState.CANCELLED else PipelineRule.FAIL
        _end(session, pipeline, rule, f"stage {stage.name} (evaluation {task.id}) is {task.state}")
    return False


def _start_stage(
    session: Session,
    ctx: AppContext,
    pipeline: Pipeline,
    plan: PipelinePlan,
    index: int,
    done: dict[str, str],
) -> Run | None:
    stage = plan.stages[index]
    assert isinstance(stage, TrainStage)
    run_plan = stage.as_run_plan(plan.project)
    producer = stage_of(run_plan.config.dataset)
    if producer is not None:
        source = session.get(Run, done[producer])
        assert source is not None  # a completed stage's run stays
        try:
            ref = stage_output_dataset(session, ctx, pipeline.id, producer, source)
        except AkkaError as exc:
            _end(
                session,
                pipeline,
                PipelineRule.FAIL,
                f"stage {stage.name} could not start: {exc.message}",
            )
            return None
        run_plan.config.dataset = ref
    trains = [s.name for s in plan.stages[:index] if isinstance(s, TrainStage)]
    binding = StageBinding(earlier=trains, runs=done)
    principal = Principal("controller", "controller", "admin", None)
    try:
        resolved = resolve_run(session, ctx, principal, run_plan, binding)
    except AkkaError as exc:
        _end(
            session,
            pipeline,
            PipelineRule.FAIL,
            f"stage {stage.name} could not start: {exc.message}",
        )
        return None
    # Locked only now (the dataset above is registered in sessions of its own, which on SQLite
    # must not wait for this one's write turn), and started only if it still runs.
    stored = lock_pipeline(session, pipeline.id)
    if stored is None or stored.state != PipelineState.RUNNING:
        return None
    document = {"kind": "run", "project": plan.project, **stage.to_json()}
    for key in ("name", "type"):
        document.pop(key, None)
    run = run_service.create_run(session, run_plan, resolved, document, pipeline.id, stage.name)
    log.info("pipeline %s started stage %s as run %s", pipeline.id, stage.name, run.id)
    return run


def advance_all(ctx: AppContext) -> bool:
    """Move every running pipeline on, each in a session of its own; whether any is running
    (the controller keeps its pace while one is)."""
    with ctx.db.session() as session:
        running = session.scalars(
            select(Pipeline.id).where(Pipeline.state == PipelineState.RUNNING)
        ).all()
    for pipeline_id in running:
        try:
            with ctx.db.session() as session:
                pipeline = session.get(Pipeline, pipeline_id)
                if pipeline is not None:
                    advance(session, ctx, pipeline)
        except IllegalTransition as exc:
            # A user cancelled or resumed it meanwhile: the next pass decides again.
            log.info("pipeline %s was not advanced: %s", pipeline_id, exc.message)
    return bool(running)


def latest_stage_run(session: Session, pipeline_id: str, stage: str) -> Run | None:
    return session.scalar(
        select(Run)
        .where(Run.pipeline_id == pipeline_id, Run.stage == stage)
        .order_by(desc(Run.created_at))
        .limit(1)
    )


def get(session: Session, ctx: AppContext, principal: Principal, ref: str) -> PipelineRecord:
    return pipeline_record(session, ctx, pipeline_for(session, principal, ref))


def list_pipelines(
    session: Session, ctx: AppContext, principal: Principal, project: str | None
) -> list[PipelineRecord]:
    query = select(Pipeline).order_by(desc(Pipeline.created_at)).limit(200)
    if project:
        principal.require(project)
        query = query.where(Pipeline.project == project)
    elif principal.projects is not None:
        query = query.where(Pipeline.project.in_(principal.projects))
    return [pipeline_record(session, ctx, p) for p in session.scalars(query)]


def cancel(session: Session, ctx: AppContext, principal: Principal, ref: str) -> PipelineRecord:
    pipeline = locked_pipeline_for(session, principal, ref)
    if pipeline.state != PipelineState.RUNNING:
        raise Conflict(f"Pipeline {pipeline.id} is already {pipeline.state}.")
    for run in session.scalars(select(Run).where(Run.pipeline_id == pipeline.id)):
        if Phase(run.phase) not in TERMINAL:
            run_service.cancel(session, ctx, principal, run.id)
    for stage in PipelinePlan.model_validate(pipeline.plan).stages:
        task = stage_evaluations.latest(session, pipeline.id, stage.name)
        if task is not None and task.state in (TaskState.PENDING, TaskState.RUNNING):
            evaluations.cancel(session, principal, task.id)
    _end(session, pipeline, PipelineRule.CANCEL, "cancelled by request")
    return pipeline_record(session, ctx, pipeline)


def resume(session: Session, ctx: AppContext, principal: Principal, ref: str) -> PipelineRecord:
    """Run a failed or cancelled pipeline again from the stage that did not complete: a paused
    stage resumes, a failed or cancelled one runs again as a new run (the old run stays in the
    record). Stages that completed keep their runs."""
    pipeline = locked_pipeline_for(session, principal, ref)
    if not PIPELINE_RULES.can(pipeline.state, PipelineRule.RESUME):
        raise Conflict(
            f"Pipeline {pipeline.id} is {pipeline.state}; only a failed or cancelled pipeline resumes."
        )
    plan = PipelinePlan.model_validate(pipeline.plan)
    move_pipeline(session, pipeline, PipelineRule.RESUME)
    done: dict[str, str] = {}
    for i, stage in enumerate(plan.stages):
        if isinstance(stage, EvaluateStage):
            task = stage_evaluations.latest(session, pipeline.id, stage.name)
            if (
                task is not None
                and task.state == TaskState.SUCCEEDED
                and stage_evaluations.gate_failure(stage, task) is None
            ):
                done[stage.name] = task.id
                continue
            reason = stage_evaluations.start(session, ctx, pipeline, plan, i, done)
            if reason is not None:
                raise Conflict(reason)
            break
        run = latest_stage_run(session, pipeline.id, stage.name)
        if run is not None and run.phase == Phase.COMPLETED:
            done[stage.name] = run.id
            continue
        if run is not None and run.phase == Phase.PAUSED:
            run_service.resume(session, ctx, principal, run.id)
        elif run is None or Phase(run.phase) in TERMINAL:
            _start_stage(session, ctx, pipeline, plan, i, done)
        break
    else:
        _end(session, pipeline, PipelineRule.COMPLETE, None)
    return pipeline_record(session, ctx, pipeline)


def wait_lines(
    ctx: AppContext, principal: Principal, ref: str, timeout: float | None
) -> Iterator[bytes]:
    """`pipelines wait` as line-delimited JSON: the pipeline each time a stage changes, ending
    with its final state. Each look is its own short session."""
    with ctx.db.session() as session:
        pipeline_id = pipeline_for(session, principal, ref).id
    return _wait_lines(ctx, pipeline_id, timeout)


def _wait_lines(ctx: AppContext, pipeline_id: str, timeout: float | None) -> Iterator[bytes]:
    last = None
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with ctx.db.session() as session:
            row = session.get(Pipeline, pipeline_id)
            assert row is not None
            body = pipeline_record(session, ctx, row)
        stages = [(s.name, s.run, s.phase) for s in body.stages]
        ended = body.state != "RUNNING"
        timed_out = deadline is not None and time.monotonic() > deadline
        if ended or timed_out:
            end = PipelineEndLine(type="pipeline", timed_out=timed_out and not ended, pipeline=body)
            yield _line(end)
            return
        if stages != last:
            last = stages
            yield _line(PipelineProgressLine(type="progress", pipeline=body))
        time.sleep(0.5)


def _line(item: PipelineProgressLine | PipelineEndLine) -> bytes:
    # json.dumps of the JSON dump, as `runs wait` writes its lines.
    return (json.dumps(json_safe(item.to_json())) + "\n").encode()


def pipeline_record(
    session: Session, ctx: AppContext, pipeline: Pipeline, existing: bool = False
) -> PipelineRecord:
    """The pipeline with each stage's latest run; `existing`: the answer to a resubmission. A
    stage with no run is WAITING while the pipeline runs and NOT_STARTED once it ended (a
    failed stage or gate before it)."""
    plan = PipelinePlan.model_validate(pipeline.plan)
    unstarted = "WAITING" if pipeline.state == PipelineState.RUNNING else "NOT_STARTED"
    stages = []
    for stage in plan.stages:
        if isinstance(stage, EvaluateStage):
            task = stage_evaluations.latest(session, pipeline.id, stage.name)
            stages.append(
                PipelineStage(
                    name=stage.name,
                    type=stage.type,
                    method="evaluate",
                    run=task.id if task else None,
                    phase=task.state if task else unstarted,
                    progress=None,
                )
            )
            continue
        run = latest_stage_run(session, pipeline.id, stage.name)
        stages.append(
            PipelineStage(
                name=stage.name,
                type=stage.type,
                method=stage.config.method,
                run=run.id if run else None,
                phase=run.phase if run else unstarted,
                progress=run_summary(run).progress if run else None,
            )
        )
    return PipelineRecord(
        id=pipeline.id,
        project=pipeline.project,
        name=pipeline.name,
        description=pipeline.description,
        state=pipeline.state,
        failure=pipeline.failure,
        created_at=pipeline.created_at,
        ended_at=pipeline.ended_at,
        stages=stages,
        existing=existing,
    )


def _end(session: Session, pipeline: Pipeline, rule: PipelineRule, failure: str | None) -> None:
    state = move_pipeline(session, pipeline, rule, failure=failure)
    log.info("pipeline %s %s%s", pipeline.id, state, f": {failure}" if failure else "")
    first = session.scalar(select(Run.id).where(Run.pipeline_id == pipeline.id).limit(1))
    if first:
        event(
            session,
            first,
            "pipeline",
            f"pipeline {pipeline.id} {state}" + (f": {failure}" if failure else ""),
        )
