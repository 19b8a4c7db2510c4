"""Applying a decision in one short transaction, after re-reading the rows it concerns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, desc, select
from sqlalchemy.orm import Session

from akka_training.controller.views import AttemptView, Decision, RunView
from akka_training.core.failures import FailureReason
from akka_training.core.phases import Phase, RuleName
from akka_training.core.states import AttemptOutcome, AttemptState
from akka_training.storage.db import Database
from akka_training.storage.models import Attempt, RolloutStep, Run, Snapshot, Step
from akka_training.storage.transitions import (
    current_claim,
    event,
    move,
    open_claim,
    release_claim,
)


def load_view(session: Session, run: Run) -> RunView:
    attempt = session.get(Attempt, (run.id, run.attempt)) if run.attempt else None
    claim = current_claim(session, run.id)
    return RunView(
        id=run.id,
        phase=run.phase,
        requested=run.requested,
        attempt=AttemptView(
            number=attempt.number,
            state=attempt.state,
            handle=attempt.handle,
            launch_tries=attempt.launch_tries,
            next_try_at=attempt.next_try_at,
            outcome=attempt.outcome,
            stop_sent=attempt.stop_sent,
            heartbeat_at=attempt.heartbeat_at,
        )
        if attempt
        else None,
        claim_state=claim.state if claim else None,
        claim_created_at=claim.created_at if claim else None,
        last_step_at=run.last_step_at,
        stalled=run.stalled_since is not None,
    )


def apply(db: Database, view: RunView, decision: Decision, now: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    with db.session() as session:
        run = session.get(Run, view.id, with_for_update=True)
        if run is None or run.phase != view.phase or run.requested != view.requested:
            return  # something moved the run since the view was taken; next pass decides again
        attempt = session.get(Attempt, (run.id, run.attempt)) if run.attempt else None
        if (attempt.number if attempt else None) != (view.attempt.number if view.attempt else None):
            return
        if decision.attempt_exited and attempt is not None and attempt.state != AttemptState.EXITED:
            attempt.state = AttemptState.EXITED
            attempt.ended_at = now
            attempt.outcome = attempt.outcome or (
                AttemptOutcome.LOST if decision.rule == RuleName.REQUEUE else AttemptOutcome.CRASHED
            )
        if decision.rule:
            move(
                session, run, decision.rule, reason=decision.reason, detail=decision.detail, now=now
            )
        if decision.stalled:
            run.stalled_since = now
            event(session, run.id, "stall", "completed steps stopped rising while the job lives")
        if decision.release_claim:
            release_claim(session, run, current_claim(session, run.id), now)
        if decision.rule == RuleName.REQUEUE:
            open_claim(session, run)
        if decision.new_attempt:
            new_attempt(session, run, now)


def new_attempt(session: Session, run: Run, now: datetime) -> Attempt:
    """The next attempt of `run`, resuming from its newest snapshot when it has one. Steps and
    rollouts past that snapshot are dropped: the new attempt reports them again."""
    latest = session.scalar(
        select(Snapshot)
        .where(Snapshot.run_id == run.id, Snapshot.swept_at.is_(None))
        .order_by(desc(Snapshot.step))
        .limit(1)
    )
    resume_step = latest.step if latest is not None and run.attempt > 0 else 0
    if run.attempt > 0:
        session.execute(delete(Step).where(Step.run_id == run.id, Step.step > resume_step))
        session.execute(
            delete(RolloutStep).where(RolloutStep.run_id == run.id, RolloutStep.step > resume_step)
        )
        run.observed_step = resume_step
    run.attempt += 1
    run.last_step_at = None
    run.stalled_since = None
    attempt = Attempt(
        run_id=run.id,
        number=run.attempt,
        state=AttemptState.PENDING,
        resume_snapshot=latest.name if latest is not None and run.attempt > 1 else None,
        created_at=now,
    )
    session.add(attempt)
    where = f" from snapshot {attempt.resume_snapshot}" if attempt.resume_snapshot else ""
    event(session, run.id, "attempt", f"attempt {attempt.number} created{where}")
    return attempt


def record_launched(db: Database, run_id: str, number: int, handle: dict[str, Any]) -> None:
    with db.session() as session:
        attempt = session.get(Attempt, (run_id, number))
        if attempt is None or attempt.state != AttemptState.PENDING:
            return
        attempt.state = AttemptState.LAUNCHED
        attempt.handle = handle
        attempt.launched_at = datetime.now(UTC)
        attempt.launch_tries += 1
        event(session, run_id, "job", f"attempt {number} launched")


def record_launch_failure(
    db: Database,
    run_id: str,
    number: int,
    error: str,
    unreachable: bool,
    retries: int,
    base_seconds: float,
) -> None:
    now = datetime.now(UTC)
    with db.session() as session:
        run = session.get(Run, run_id, with_for_update=True)
        attempt = session.get(Attempt, (run_id, number))
        if run is None or attempt is None or attempt.state != AttemptState.PENDING:
            return
        attempt.launch_tries += 1
        attempt.last_error = error
        if attempt.launch_tries > retries:
            reason = (
                FailureReason.CLUSTER_UNREACHABLE if unreachable else FailureReason.JOB_START_FAILED
            )
            tries = f"{attempt.launch_tries} {'try' if attempt.launch_tries == 1 else 'tries'}"
            detail = f"{tries}; the last one said: {error}"
            attempt.state = AttemptState.EXITED
            attempt.outcome = AttemptOutcome.NOT_STARTED
            attempt.ended_at = now
            if run.phase not in (Phase.COMPLETED, Phase.FAILED, Phase.CANCELLED):
                move(session, run, RuleName.FAIL, reason=reason, detail=detail, now=now)
            release_claim(session, run, current_claim(session, run_id), now)
            return
        delay = base_seconds * 2 ** (attempt.launch_tries - 1)
        attempt.next_try_at = now + timedelta(seconds=delay)
        event(
            session,
            run_id,
            "job",
            f"launch of attempt {number} failed ({error}); retrying in {delay:.0f} s",
        )


def record_stop_sent(db: Database, run_id: str, number: int) -> None:
    with db.session() as session:
        attempt = session.get(Attempt, (run_id, number))
        if attempt is not None:
            attempt.stop_sent = True
