"""Applying a decision in one short transaction, after re-reading the rows it concerns."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, desc, select
from sqlalchemy.orm import Session

from akka_training.controller.views import AttemptView, Decision, RunView
from akka_training.core.failures import FailureReason
from akka_training.core.figures import Figures
from akka_training.core.interactive import INTERACTIVE_METHOD
from akka_training.core.phases import TERMINAL, Phase, RuleName
from akka_training.core.states import (
    OPEN_CLAIM_STATES,
    AttemptOutcome,
    AttemptRule,
    AttemptState,
)
from akka_training.storage.db import Database
from akka_training.storage.models import Attempt, Claim, RolloutStep, Run, Snapshot, Step
from akka_training.storage.tokens import revoke_attempt_tokens
from akka_training.storage.transitions import (
    current_claim,
    event,
    lock_run,
    move,
    move_attempt,
    open_claim,
    release_claim,
)

# Runs read per statement when views are loaded together (well below every database's limit on
# the parameters of one statement).
VIEW_BATCH = 500


def load_view(session: Session, run: Run) -> RunView:
    return load_views(session, [run.id])[0]


def load_views(session: Session, run_ids: Sequence[str]) -> list[RunView]:
    """The views of `run_ids` (in that order; ids of runs that no longer exist are left out),
    read with one statement per table for each `VIEW_BATCH` of runs, whatever their number: a
    controller pass reads every open run this way."""
    views: list[RunView] = []
    for start in range(0, len(run_ids), VIEW_BATCH):
        views.extend(_load_batch(session, list(run_ids[start : start + VIEW_BATCH])))
    return views


def _load_batch(session: Session, ids: list[str]) -> list[RunView]:
    runs = {
        row.id: row
        for row in session.execute(
            select(
                Run.id,
                Run.phase,
                Run.requested,
                Run.attempt,
                Run.last_step_at,
                Run.stalled_since,
                Run.pool,
                Run.method,
            ).where(Run.id.in_(ids))
        )
    }
    attempts = {
        a.run_id: a
        for a in session.execute(
            select(
                Attempt.run_id,
                Attempt.number,
                Attempt.state,
                Attempt.handle,
                Attempt.launch_tries,
                Attempt.next_try_at,
                Attempt.outcome,
                Attempt.stop_sent,
                Attempt.heartbeat_at,
            )
            .join(Run, (Run.id == Attempt.run_id) & (Run.attempt == Attempt.number))
            .where(Run.id.in_(ids))
        )
    }
    # A run's current claim is its newest open one (`transitions.current_claim`).
    claims: dict[str, Any] = {}
    for c in session.execute(
        select(Claim.run_id, Claim.state, Claim.created_at, Claim.devices)
        .where(Claim.run_id.in_(ids), Claim.state.in_(OPEN_CLAIM_STATES))
        .order_by(desc(Claim.id))
    ):
        claims.setdefault(c.run_id, c)
    ended: dict[str, list[str | None]] = {}
    for run_id, outcome in session.execute(
        select(Attempt.run_id, Attempt.outcome)
        .where(Attempt.run_id.in_(ids), Attempt.state == AttemptState.EXITED)
        .order_by(Attempt.run_id, desc(Attempt.number))
    ):
        ended.setdefault(run_id, []).append(outcome)
    views = []
    for run_id in ids:
        run = runs.get(run_id)
        if run is None:
            continue
        attempt = attempts.get(run_id) if run.attempt else None
        claim = claims.get(run_id)
        views.append(
            RunView(
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
                crashes=_crashes(ended.get(run_id, [])),
                claim_devices=claim.devices if claim else 0,
                pool=run.pool,
                interactive=run.method == INTERACTIVE_METHOD,
            )
        )
    return views


def _crashes(outcomes: list[str | None]) -> int:
    """`outcomes`: the ended attempts' outcomes, newest first."""
    count = 0
    for outcome in outcomes:
        if outcome != AttemptOutcome.CRASHED:
            break
        count += 1
    return count


def apply(db: Database, view: RunView, decision: Decision, now: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    with db.session() as session:
        run = lock_run(session, view.id)
        if run is None or run.phase != view.phase or run.requested != view.requested:
            return  # something moved the run since the view was taken; next pass decides again
        attempt = session.get(Attempt, (run.id, run.attempt)) if run.attempt else None
        if (attempt.number if attempt else None) != (view.attempt.number if view.attempt else None):
            return
        if decision.attempt_exited and attempt is not None and attempt.state != AttemptState.EXITED:
            lost = decision.rule == RuleName.REQUEUE and not decision.retry
            outcome = AttemptOutcome.LOST if lost else AttemptOutcome.CRASHED
            move_attempt(session, attempt, AttemptRule.EXIT, outcome=outcome, now=now)
            revoke_attempt_tokens(session, run.id, attempt.number, now)
        if decision.retry and attempt is not None and decision.note:
            event(session, run.id, "job", f"attempt {attempt.number} {decision.note}")
        if decision.rule == RuleName.REQUEUE:
            move(session, run, decision.rule, now=now)
        elif decision.rule:
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
            created = new_attempt(session, run, now)
            if decision.launch_delay:
                created.next_try_at = now + timedelta(seconds=decision.launch_delay)
                event(
                    session,
                    run.id,
                    "job",
                    f"attempt {created.number} launches in {decision.launch_delay:.3g} s "
                    f"(back-off after {view.crashes} in a row that died without a report)",
                )


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
        # The dropped steps leave the run's sums too, or the steps reported again count twice.
        dropped = session.scalars(
            select(Step.metrics).where(Step.run_id == run.id, Step.step > resume_step)
        ).all()
        if dropped:
            run.summary = run.summary.without_steps(Figures.of(m) for m in dropped)
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
        # The run first, as every change of a run's rows does: a cancel or a pass that ends the
        # attempt meanwhile comes before or after this, not in between.
        lock_run(session, run_id)
        attempt = session.get(Attempt, (run_id, number))
        if attempt is None or attempt.state != AttemptState.PENDING:
            return
        move_attempt(session, attempt, AttemptRule.LAUNCH, handle=handle)
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
        run = lock_run(session, run_id)
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
            move_attempt(
                session, attempt, AttemptRule.EXIT, outcome=AttemptOutcome.NOT_STARTED, now=now
            )
            revoke_attempt_tokens(session, run_id, number, now)
            if Phase(run.phase) not in TERMINAL:
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
