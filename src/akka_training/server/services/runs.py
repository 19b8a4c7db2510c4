"""Runs as users drive them: start (with dry run), read, cancel, pause, resume, branch, continue,
wait and read the job's logs. The two that reach the cluster or stream (`logs`, `wait_lines`)
open their own short sessions, so that no cluster call and no wait happens inside one."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import desc, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from akka_training.api.runs import (
    DryRun,
    JobLogs,
    Metrics,
    RunEndLine,
    RunEventLine,
    RunProgressLine,
    RunRecord,
    RunSummary,
    RunTree,
    StepFigures,
    TreeNode,
    TreeOrigin,
)
from akka_training.api.runs import Snapshot as SnapshotRecord
from akka_training.backends.base import ClusterUnreachable
from akka_training.core.documents import deep_merge
from akka_training.core.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    PlanRefused,
    ServiceUnavailable,
)
from akka_training.core.figures import Figures, json_safe
from akka_training.core.parsing import parse_plan
from akka_training.core.phases import TERMINAL, Phase, RuleName
from akka_training.core.plans import LOSS_METHODS, RL_METHODS, RunPlan
from akka_training.core.states import AttemptState, Request
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.services.lookups import locked_run_for, run_for
from akka_training.server.services.plans import Resolved, every_problem, resolve_run
from akka_training.server.services.run_views import run_record, run_summary
from akka_training.storage.ids import new_id
from akka_training.storage.models import Attempt, Event, Run, Snapshot, Step
from akka_training.storage.transitions import (
    check_request,
    current_claim,
    event,
    move,
    open_claim,
    release_claim,
    request,
)


def start(
    session: Session,
    ctx: AppContext,
    principal: Principal,
    document: dict[str, Any],
    dry_run: bool,
) -> RunRecord | DryRun:
    try:
        plan = parse_plan(document)
    except PlanRefused as refused:
        if document.get("kind", "run") != "run":
            raise
        raise every_problem(session, ctx, principal, document, refused) from None
    if not isinstance(plan, RunPlan):
        raise InvalidRequest(
            "This is a pipeline plan; start it with `akka training pipelines start`."
        )
    principal.require(plan.project)
    if plan.submission_id and not dry_run:
        existing = _by_submission(session, plan.project, plan.submission_id)
        if existing is not None:
            return run_record(session, ctx, existing, existing=True)
    resolved = resolve_run(session, ctx, principal, plan)
    if dry_run:
        return DryRun(dry_run=True, settings=resolved.settings.to_json())
    try:
        # The run's row is flushed before its claim: on Postgres a submission racing another
        # with the same submissionId fails there (once the other commits), on SQLite at its
        # turn to write, and either way here rather than at the commit only.
        run = create_run(session, plan, resolved, document)
        if ctx.telemetry is not None:
            with ctx.telemetry.span("run.submit", run) as traceparent:
                run.traceparent = traceparent
        session.commit()
    except IntegrityError:
        # Two submissions with the same submissionId raced; the other one won.
        session.rollback()
        existing = _by_submission(session, plan.project, plan.submission_id or "")
        if existing is None:
            raise
        return run_record(session, ctx, existing, existing=True)
    return run_record(session, ctx, run)


def _committed(session: Session, ctx: AppContext, run: Run) -> RunRecord:
    """Commit the change, then build the answer. On SQLite a writer holds the database's one write
    turn from its first write until its commit; the answer's reads (cost, queue, settings) happen
    after it, so a burst of writers waits for each other's writes only, not for their answers."""
    session.commit()
    return run_record(session, ctx, run)


def create_run(
    session: Session,
    plan: RunPlan,
    resolved: Resolved,
    document: dict[str, Any],
    pipeline_id: str | None = None,
    stage: str | None = None,
) -> Run:
    settings = resolved.settings
    now = datetime.now(UTC)
    run = Run(
        id=new_id(),
        project=plan.project,
        model_name=plan.model_name,
        description=plan.description,
        submission_id=plan.submission_id,
        method=settings.method,
        engine=settings.engine,
        base_model=settings.base_model.id,
        dataset=f"{settings.dataset.name}:v{settings.dataset.version}",
        pool=settings.execution.pool or "",
        gpus=settings.execution.gpus,
        plan=document,
        settings=settings.to_json(),
        source_run=settings.source.run if settings.source else None,
        source_snapshot=settings.source.snapshot if settings.source else None,
        source_kind=resolved.source_kind,
        pipeline_id=pipeline_id,
        stage=stage,
        phase=Phase.QUEUED.value,
        phase_since=now,
        phase_seconds={},
        created_at=now,
    )
    session.add(run)
    session.flush()  # the run's row first: its claim and events refer to it
    open_claim(session, run)
    event(session, run.id, "submitted", f"submitted {settings.method} on {settings.base_model.id}")
    return run


def get(session: Session, ctx: AppContext, principal: Principal, run_ref: str) -> RunRecord:
    return run_record(session, ctx, run_for(session, principal, run_ref))


def list_runs(
    session: Session,
    ctx: AppContext,
    principal: Principal,
    project: str | None,
    phase: str | None,
    limit: int,
) -> list[RunSummary]:
    query = select(Run).order_by(desc(Run.created_at)).limit(limit)
    if project:
        principal.require(project)
        query = query.where(Run.project == project)
    elif principal.projects is not None:
        query = query.where(Run.project.in_(principal.projects))
    if phase == "open":
        query = query.where(Run.phase.not_in([p.value for p in TERMINAL]))
    elif phase:
        try:
            query = query.where(Run.phase == Phase(phase.upper()).value)
        except ValueError as exc:
            raise InvalidRequest(
                f"--phase takes open or one of {', '.join(p.value for p in Phase)}."
            ) from exc
    return [run_summary(r) for r in session.scalars(query)]


def cancel(session: Session, ctx: AppContext, principal: Principal, run_ref: str) -> RunRecord:
    run = locked_run_for(session, principal, run_ref)
    if Phase(run.phase) in TERMINAL:
        raise Conflict(f"Run {run.id} is already {run.phase}.")
    if run.phase in (Phase.QUEUED, Phase.PAUSED) or _no_job(session, run):
        move(session, run, RuleName.CANCEL)
        release_claim(session, run, current_claim(session, run.id))
    else:
        # The controller stops the job and ends the run once the job is gone.
        request(session, run, Request.CANCEL)
    return _committed(session, ctx, run)


def pause(
    session: Session, ctx: AppContext, principal: Principal, run_ref: str, checkpoint: str
) -> RunRecord:
    if checkpoint not in ("save", "latest"):
        raise InvalidRequest("--checkpoint takes save (snapshot at the next step) or latest.")
    run = locked_run_for(session, principal, run_ref)
    phase = Phase(run.phase)
    if phase in TERMINAL:
        raise Conflict(f"Run {run.id} is {run.phase}; only an open run can pause.")
    wanted = Request.pause(checkpoint)
    if phase in (Phase.PAUSING, Phase.PAUSED) and run.requested != Request.CANCEL:
        return run_record(session, ctx, run)  # pausing or paused already, as first asked
    check_request(run, wanted)  # a pending cancel is never undone by a pause
    if phase == Phase.QUEUED:
        move(session, run, RuleName.PAUSE_WHILE_QUEUED)
        release_claim(session, run, current_claim(session, run.id))
        return _committed(session, ctx, run)
    move(session, run, RuleName.REQUEST_PAUSE, request=wanted)
    return _committed(session, ctx, run)


def resume(session: Session, ctx: AppContext, principal: Principal, run_ref: str) -> RunRecord:
    run = locked_run_for(session, principal, run_ref)
    if run.phase != Phase.PAUSED:
        raise Conflict(f"Run {run.id} is {run.phase}; only a PAUSED run resumes.")
    move(session, run, RuleName.RESUME)
    open_claim(session, run)
    return _committed(session, ctx, run)


def derive(
    session: Session,
    ctx: AppContext,
    principal: Principal,
    run_ref: str,
    snapshot: str,
    restore: str,
    steps: int | None,
    overrides: dict[str, Any] | None,
    dry_run: bool = False,
) -> RunRecord | DryRun:
    """`runs branch` (restore weights) and `runs continue` (restore the training state): a new
    run from one of `run_ref`'s snapshots, with the source run's plan and the overrides."""
    source = run_for(session, principal, run_ref)
    snap = session.get(Snapshot, (source.id, snapshot))
    if snap is None or snap.swept_at is not None:
        names = session.scalars(
            select(Snapshot.name).where(Snapshot.run_id == source.id, Snapshot.swept_at.is_(None))
        ).all()
        raise NotFound(
            f"Run {source.id} has no snapshot {snapshot!r}; its snapshots: {', '.join(names) or 'none'}."
        )
    document = copy.deepcopy(source.plan)
    for key in ("submissionId", "source"):
        document.pop(key, None)
    if overrides:
        document = deep_merge(document, overrides)
    document["source"] = {"run": source.id, "snapshot": snapshot, "restore": restore}
    section = "rlHyperparams" if document["config"]["method"] in RL_METHODS else "hyperparams"
    training = document["config"].setdefault(section, {}).setdefault("training", {})
    if steps is not None:
        # The steps the new run trains: a continuation trains them on from the snapshot's step
        # (its engine counts from there), a branch from step 0.
        training["maxSteps"] = steps
    elif restore == "trainingState" and source.total_steps:
        # Without --steps a continuation trains what its source had left.
        training["maxSteps"] = max(1, source.total_steps - snap.step)
    return start(session, ctx, principal, document, dry_run)


def snapshots(session: Session, principal: Principal, run_ref: str) -> list[SnapshotRecord]:
    run = run_for(session, principal, run_ref)
    rows = session.scalars(
        select(Snapshot).where(Snapshot.run_id == run.id).order_by(Snapshot.step)
    )
    return [
        SnapshotRecord(
            run=run.id,
            name=s.name,
            step=s.step,
            attempt=s.attempt,
            weights=s.weights,
            training_state=s.training_state,
            weights_bytes=s.weights_bytes,
            training_state_bytes=s.training_state_bytes,
            created_at=s.created_at,
            swept=s.swept_at is not None,
        )
        for s in rows
    ]


def metrics(
    session: Session, principal: Principal, run_ref: str, fields: list[str] | None
) -> Metrics:
    run = run_for(session, principal, run_ref)
    rows = list(session.scalars(select(Step).where(Step.run_id == run.id).order_by(Step.step)))
    if fields and rows:
        names = sorted({k for row in rows for k in row.metrics})
        unknown = [f for f in fields if not any(_matches(k, f) for k in names)]
        if unknown:
            raise InvalidRequest(
                f"Run {run.id} has no figure named {unknown[0]!r} (nor one under it); its "
                f"figures: {', '.join(names)}."
            )
    steps = []
    for row in rows:
        figures = row.metrics
        if fields:
            figures = {k: v for k, v in figures.items() if any(_matches(k, f) for f in fields)}
        # The figures are the answer's own keys, beside step, attempt and at (`StepFigures`).
        steps.append(
            StepFigures.model_validate(
                {**figures, "step": row.step, "attempt": row.attempt, "at": row.created_at}
            )
        )
    return Metrics(run=run.id, method=run.method, steps=steps)


def events(session: Session, run_id: str, after: int) -> list[RunEventLine]:
    rows = session.scalars(
        select(Event).where(Event.run_id == run_id, Event.id > after).order_by(Event.id)
    )
    return [
        RunEventLine(type="event", id=e.id, at=e.at, kind=e.kind, message=e.message, data=e.data)
        for e in rows
    ]


def logs(
    ctx: AppContext, principal: Principal, run_ref: str, offset: int, attempt: int | None
) -> JobLogs:
    """The job's output from `offset`: read from the cluster once the session is closed."""
    with ctx.db.session() as session:
        run = run_for(session, principal, run_ref)
        number = attempt or run.attempt
        row = session.get(Attempt, (run.id, number)) if number else None
        handle = row.handle if row is not None else None
        run_open = Phase(run.phase) not in TERMINAL
        job_open = run_open and row is not None and row.state != AttemptState.EXITED
        run_id = run.id
    if not handle:
        return JobLogs(run=run_id, attempt=number, text="", offset=offset, open=run_open)
    try:
        text, next_offset = ctx.backend.logs(handle, offset)
    except ClusterUnreachable as exc:
        raise ServiceUnavailable(
            f"The training cluster does not answer, so the logs cannot be read: {exc}"
        ) from exc
    return JobLogs(run=run_id, attempt=number, text=text, offset=next_offset, open=job_open)


# How often `runs wait` looks at its run. Each look is a session, the run, its newest steps and
# events: at every half second it cost a training service 0.7% of a core, which the training
# threads beside it feel twice over on a small host (bench/engine_overhead.py).
WAIT_POLL_SECONDS = 1.0


def wait_lines(
    ctx: AppContext, principal: Principal, run_ref: str, timeout: float | None, until: str
) -> Iterator[bytes]:
    """`runs wait` as line-delimited JSON: events, progress, and at the end the full record.
    Each look at the run is its own short session; none is held while waiting."""
    with ctx.db.session() as session:
        run_id = run_for(session, principal, run_ref).id
    stop_phases = set(TERMINAL) | ({Phase.PAUSED} if until == "rest" else set())
    return _wait_lines(ctx, run_id, stop_phases, timeout)


def _wait_lines(
    ctx: AppContext, run_id: str, stop_phases: set[Phase], timeout: float | None
) -> Iterator[bytes]:
    after = 0
    step = -1
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with ctx.db.session() as session:
            # The run first, then its events: an event is committed with the change it tells
            # of, so the events read after the run include the one of the phase it is in.
            current = session.get(Run, run_id)
            assert current is not None
            done = Phase(current.phase) in stop_phases
            progress = None
            if current.observed_step != step:
                step = current.observed_step
                progress = _line(_progress_line(session, current))
            if progress is not None and done:
                # The last step comes before the event that ends the run.
                yield progress
                progress = None
            for e in events(session, run_id, after):
                after = e.id
                yield _line(e)
            if progress is not None:
                yield progress
            timed_out = deadline is not None and time.monotonic() > deadline
            if done or timed_out:
                record = run_record(session, ctx, current)
                yield _line(RunEndLine(type="run", timed_out=timed_out and not done, run=record))
                return
        time.sleep(WAIT_POLL_SECONDS)


def _progress_line(session: Session, run: Run) -> RunProgressLine:
    """The run's step with its loss or reward and the time left at this attempt's pace."""
    line = RunProgressLine(
        type="progress", phase=run.phase, step=run.observed_step, total_steps=run.total_steps
    )
    rows = session.scalars(
        select(Step)
        .where(Step.run_id == run.id, Step.attempt == run.attempt)
        .order_by(Step.step.desc())
        .limit(20)
    ).all()
    if not rows:
        return line
    figures = [Figures.of(r.metrics) for r in rows]
    latest = figures[0]
    if run.method in LOSS_METHODS:
        line.loss = latest.loss
    else:
        line.reward = latest.reward_mean
        line.terms = latest.term_shares()
    timed = [f.step_seconds for f in figures if f.step_seconds is not None]
    if timed and run.total_steps and run.observed_step is not None:
        left = max(0, run.total_steps - run.observed_step)
        line.eta_seconds = left * sum(timed) / len(timed)
    return line


def _line(item: RunEventLine | RunProgressLine | RunEndLine) -> bytes:
    # json.dumps of the JSON dump, not model_dump_json: the lines keep the spacing they have
    # always had.
    return (json.dumps(json_safe(item.to_json())) + "\n").encode()


def tree(session: Session, principal: Principal, run_ref: str) -> RunTree:
    run = run_for(session, principal, run_ref)
    root = run
    seen = {run.id}
    while root.source_run and root.source_run not in seen:
        parent = session.get(Run, root.source_run)
        if parent is None or not principal.can(parent.project):
            break
        seen.add(parent.id)
        root = parent
    return RunTree(root=root.id, focus=run.id, tree=_subtree(session, principal, root))


def _subtree(session: Session, principal: Principal, run: Run) -> TreeNode:
    children = session.scalars(
        select(Run).where(Run.source_run == run.id).order_by(Run.created_at)
    ).all()
    return TreeNode(
        run=run.id,
        method=run.method,
        phase=run.phase,
        origin=(
            TreeOrigin(kind=run.source_kind, snapshot=run.source_snapshot)
            if run.source_run
            else None
        ),
        model_name=run.model_name,
        children=[_subtree(session, principal, c) for c in children if principal.can(c.project)],
    )


def _matches(key: str, pattern: str) -> bool:
    return (
        key == pattern
        or key.startswith(pattern.rstrip("*").rstrip("/") + "/")
        or (pattern.endswith("*") and key.startswith(pattern[:-1]))
    )


def _by_submission(session: Session, project: str, submission_id: str) -> Run | None:
    return session.scalar(
        select(Run).where(Run.project == project, Run.submission_id == submission_id)
    )


def _no_job(session: Session, run: Run) -> bool:
    attempt = session.get(Attempt, (run.id, run.attempt)) if run.attempt else None
    return attempt is None or attempt.state == AttemptState.PENDING
