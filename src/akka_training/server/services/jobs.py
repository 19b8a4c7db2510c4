"""Reports from training jobs, and the directive each one is answered with."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.api.jobs import REPORTS, Directive
from akka_training.core.errors import Conflict, Forbidden, InvalidRequest, PlanRefused, Problem
from akka_training.core.failures import FailureReason
from akka_training.core.figures import Figures
from akka_training.core.parsing import parse_model
from akka_training.core.phases import TERMINAL, Phase, RuleName, can
from akka_training.core.reports import (
    Action,
    BatchReport,
    FailedReport,
    FinishedReport,
    HeartbeatReport,
    RolloutsReport,
    SnapshotReport,
    StartedReport,
    StepReport,
    StoppedReport,
    TrainingReport,
)
from akka_training.core.states import AttemptOutcome, Request
from akka_training.server.auth import Principal
from akka_training.storage.models import Attempt, RolloutStep, Run, Snapshot, Step
from akka_training.storage.tokens import revoke_attempt_tokens
from akka_training.storage.transitions import event, lock_run, move, record_outcome


def handle(
    session: Session,
    principal: Principal,
    run_id: str,
    attempt_no: int,
    kind: str,
    body: dict[str, Any],
) -> Directive:
    if principal.kind != "job" or principal.run_id != run_id or principal.attempt != attempt_no:
        raise Forbidden("This token reports for another run or attempt.")
    model = REPORTS.get(kind)
    if model is None:
        raise InvalidRequest(f"There is no report {kind!r}; reports: {', '.join(REPORTS)}.")
    report = parse_model(model, body)
    # A batch is its reports, each read as if it had come alone (all of them before any is
    # taken: a batch holding a refused report changes nothing).
    reports = _unbatched(report) if isinstance(report, BatchReport) else [(kind, report)]
    run = lock_run(session, run_id)
    attempt = session.get(Attempt, (run_id, attempt_no))
    if run is None or attempt is None:
        raise Conflict("This attempt is not known to the trainer.")
    if run.attempt != attempt_no or attempt.outcome is not None:
        raise Conflict(f"Attempt {attempt_no} of run {run_id} is no longer current; stop.")
    now = datetime.now(UTC)
    attempt.heartbeat_at = now
    t = _Taking(session, run, attempt, now)
    t.read_kept(reports)
    # Nothing is written before the commit (one flush, not one before each report's reads).
    with session.no_autoflush:
        for one_kind, one in reports:
            _HANDLERS[one_kind](t, one)
    if attempt.outcome is not None:
        # The attempt has ended: its token reports nothing more (a retry of this same report
        # is answered as for an attempt that is no longer current).
        revoke_attempt_tokens(session, run_id, attempt_no, now)
    return Directive(action=directive(run))


def _unbatched(batch: BatchReport) -> list[tuple[str, Any]]:
    reports: list[tuple[str, Any]] = []
    for i, r in enumerate(batch.reports):
        try:
            reports.append((r.kind, parse_model(REPORTS[r.kind], r.body)))
        except PlanRefused as exc:
            problems = [
                Problem(f"reports[{i}].body.{p.field}", p.message) for p in exc.all_problems
            ]
            raise PlanRefused(problems, what=f"{r.kind} report {i} of the batch") from exc
    return reports


@dataclass
class _Taking:
    """One request's reports being taken: the run, its attempt, and the rows already kept
    for the steps they report (read in one statement a table, not one a report)."""

    session: Session
    run: Run
    attempt: Attempt
    now: datetime
    steps: dict[int, Step] = field(default_factory=dict)
    rollouts: dict[int, RolloutStep] = field(default_factory=dict)

    def read_kept(self, reports: list[tuple[str, Any]]) -> None:
        steps = [r.step for k, r in reports if k == "steps"]
        if steps:
            rows = self.session.scalars(
                select(Step).where(Step.run_id == self.run.id, *_between(Step.step, steps))
            )
            self.steps = {row.step: row for row in rows}
        rollouts = [r.step for k, r in reports if k == "rollouts"]
        if rollouts:
            rows_ = self.session.scalars(
                select(RolloutStep).where(
                    RolloutStep.run_id == self.run.id, *_between(RolloutStep.step, rollouts)
                )
            )
            self.rollouts = {row.step: row for row in rows_}


def _between(column: Any, numbers: list[int]) -> tuple[Any, Any]:
    # A range, not a list: a batch's steps follow each other, and a statement with two
    # parameters is cheaper to build than one with a parameter a step.
    return column >= min(numbers), column <= max(numbers)


def directive(run: Run) -> Action:
    if Phase(run.phase) in TERMINAL or run.requested in (Request.CANCEL, Request.PAUSE_LATEST):
        return "stop"
    if run.requested == Request.PAUSE_SAVE:
        return "save-and-stop"
    return "continue"


def _started(t: _Taking, r: StartedReport) -> None:
    session, run, attempt, now = t.session, t.run, t.attempt, t.now
    attempt.started_at = now
    attempt.placement = r.placement.to_json()
    event(
        session,
        run.id,
        "job",
        f"attempt {attempt.number} started on {r.placement.host}",
        # The key of a job's API stays with the attempt; the run's events do not show it.
        r.placement.model_dump(mode="json", by_alias=True, exclude={"api_key"}),
    )


def _training(t: _Taking, r: TrainingReport) -> None:
    session, run, now = t.session, t.run, t.now
    if r.total_steps is not None:
        run.total_steps = r.total_steps
    if r.data_fit is not None:
        run.data_fit = r.data_fit
    if r.adapter_modules:
        run.adapter_modules = r.adapter_modules
    run.last_step_at = now
    if can(run.phase, RuleName.START_TRAINING) and run.phase == Phase.PREPARING:
        move(session, run, RuleName.START_TRAINING, now=now)


def _step(t: _Taking, r: StepReport) -> None:
    session, run, attempt, now = t.session, t.run, t.attempt, t.now
    # A step of a new attempt replaces what an earlier attempt reported for the same step
    # (after a pause at the latest snapshot): the run's figures count the step once.
    row = t.steps.get(r.step)
    replaced = None
    if row is None:
        row = t.steps[r.step] = Step(run_id=run.id, step=r.step)
        session.add(row)
    else:  # kept before (or earlier in this request): its figures stop counting
        replaced = Figures.of(row.metrics)
    figures = Figures.of(r.metrics)
    at = _ended_at(attempt, r, now)
    row.attempt, row.metrics, row.created_at = attempt.number, r.metrics, at
    run.observed_step = r.step
    if r.total_steps is not None:
        run.total_steps = r.total_steps
    run.last_step_at = at
    if run.stalled_since is not None:
        event(session, run.id, "stall", f"steps resumed at step {r.step}")
    run.stalled_since = None
    run.summary = run.summary.with_step(r.step, figures, run.method, replaced)
    run.memory = _memory(run.memory, r.step, figures)
    if run.phase == Phase.PREPARING:
        move(session, run, RuleName.START_TRAINING, now=now)
    if r.pause is not None:
        _monitor_pause(session, run, r, now)


def _ended_at(attempt: Attempt, r: StepReport, now: datetime) -> datetime:
    """When the step ended: `now` less the age its report gives (a step that waited to go with
    others), never before the attempt started."""
    if not r.ago:
        return now
    at = now - timedelta(seconds=r.ago)
    # Timestamps are read back timezone-aware (`storage.models.UtcDateTime`).
    return at if attempt.started_at is None else max(at, attempt.started_at)


def _monitor_pause(session: Session, run: Run, r: StepReport, now: datetime) -> None:
    """A monitor of the job tripped: the run pauses as with ``--checkpoint save`` (the job
    has saved at this step and stops), unless the user asked for something already."""
    assert r.pause is not None
    run.summary = run.summary.with_pause(r.pause)
    event(session, run.id, "monitor", r.pause.reason, r.pause.to_json())
    if run.requested is None and can(run.phase, RuleName.REQUEST_PAUSE):
        move(session, run, RuleName.REQUEST_PAUSE, request=Request.PAUSE_SAVE, now=now)


def _snapshot(t: _Taking, r: SnapshotReport) -> None:
    session, run, attempt, now = t.session, t.run, t.attempt, t.now
    session.flush()  # a snapshot of the same name earlier in this batch is found as well
    existing = session.get(Snapshot, (run.id, r.name))
    if existing is not None:
        session.delete(existing)
        session.flush()
    session.add(
        Snapshot(
            run_id=run.id,
            name=r.name,
            step=r.step,
            attempt=attempt.number,
            weights=r.weights,
            training_state=r.training_state,
            weights_bytes=r.weights_bytes,
            training_state_bytes=r.training_state_bytes,
            created_at=now,
        )
    )
    run.saved_step = max(run.saved_step or 0, r.step)
    event(session, run.id, "snapshot", f"snapshot {r.name} at step {r.step}")


def _rollouts(t: _Taking, r: RolloutsReport) -> None:
    # A step reported again (trained again by a later attempt) points at its new file.
    row = t.rollouts.get(r.step)
    if row is None:
        row = t.rollouts[r.step] = RolloutStep(run_id=t.run.id, step=r.step)
        t.session.add(row)
    row.blob, row.count, row.created_at = r.blob, r.count, t.now
    row.best_score, row.worst_score = r.best_score, r.worst_score


def _heartbeat(t: _Taking, r: HeartbeatReport) -> None:
    session, run = t.session, t.run
    if r.stall_dump and r.stall_dump != run.stall_dump:
        run.stall_dump = r.stall_dump
        event(session, run.id, "stall", f"the job recorded its threads and memory: {r.stall_dump}")


def _finished(t: _Taking, r: FinishedReport) -> None:
    session, run, attempt, now = t.session, t.run, t.attempt, t.now
    record_outcome(session, attempt, AttemptOutcome.FINISHED)
    run.adapter = r.adapter
    run.observed_step = max(run.observed_step, r.step)
    if r.adapter_modules:
        run.adapter_modules = r.adapter_modules
    run.summary = run.summary.with_end(r.summary)
    if can(run.phase, RuleName.COMPLETE):
        move(session, run, RuleName.COMPLETE, now=now)


def _stopped(t: _Taking, r: StoppedReport) -> None:
    session, run, attempt = t.session, t.run, t.attempt
    # The run becomes PAUSED or CANCELLED once the job has exited and its devices are free: the
    # controller moves it then (a resume must find the devices released).
    record_outcome(session, attempt, AttemptOutcome.STOPPED)
    event(session, run.id, "job", f"attempt {attempt.number} stopped at step {r.step}")


def _failed(t: _Taking, r: FailedReport) -> None:
    session, run, attempt, now = t.session, t.run, t.attempt, t.now
    record_outcome(session, attempt, AttemptOutcome.FAILED)
    try:
        reason = FailureReason(r.code)
    except ValueError:
        reason = FailureReason.TRAINING_ERROR
    if can(run.phase, RuleName.FAIL):
        move(session, run, RuleName.FAIL, reason=reason, detail=r.detail, now=now)


def _memory(
    current: dict[str, float] | None, step: int, step_figures: Figures
) -> dict[str, float] | None:
    """What `runs.memory` keeps: the memory split of the step that reserved the most."""
    figures = step_figures.memory()
    if not figures:
        return current
    # The split of the step that reserved the most (the host peak where there is no device).
    size = figures.get("reserved", figures.get("host_peak", 0.0))
    best = (current or {}).get("reserved", (current or {}).get("host_peak", -1.0))
    if current is not None and size <= best:
        return current
    return {"step": step, **figures}


_HANDLERS: dict[str, Any] = {
    "started": _started,
    "training": _training,
    "steps": _step,
    "snapshots": _snapshot,
    "rollouts": _rollouts,
    "heartbeat": _heartbeat,
    "finished": _finished,
    "stopped": _stopped,
    "failed": _failed,
}
