"""The one place a run's phase changes, and the bookkeeping that goes with it: events, and the
claim a run opens and releases. Both the request path (`server.services`) and the controller
move runs, so this lives below them both."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import desc, select
from sqlalchemy.orm import Session

from akka_training.core.failures import FailureReason, failure_text
from akka_training.core.phases import TERMINAL, Phase, RuleName, transition
from akka_training.core.states import OPEN_CLAIM_STATES, ClaimState
from akka_training.storage import listeners
from akka_training.storage.models import Claim, Event, Run


def move(
    session: Session,
    run: Run,
    rule: RuleName,
    *,
    reason: FailureReason | None = None,
    detail: str | None = None,
    now: datetime | None = None,
) -> Phase:
    """Apply the named rule to `run` (raises `IllegalTransition` when it does not allow the
    move), account the time spent in the phase left, and record an event."""
    now = now or datetime.now(UTC)
    old = Phase(run.phase)
    new = transition(old, rule)
    seconds = dict(run.phase_seconds or {})
    seconds[old.value] = round(
        seconds.get(old.value, 0.0) + (now - run.phase_since).total_seconds(), 3
    )
    run.phase_seconds = seconds
    run.phase = new.value
    run.phase_since = now
    if new == Phase.PREPARING and run.started_at is None:
        run.started_at = now
    if new in TERMINAL:
        run.ended_at = now
        run.requested = None
    if new in (Phase.PAUSED, Phase.QUEUED):
        run.requested = None
    if reason is not None:
        run.failure_code = reason.value
        run.failure_detail = detail
    message = f"{old.value} -> {new.value} ({rule})"
    data: dict[str, Any] = {"from": old.value, "to": new.value, "rule": rule}
    if reason is not None:
        message += f": {failure_text(reason, detail, run.method).splitlines()[0]}"
        data["failureCode"] = reason.value
        heard = listeners.of(session)
        if heard is not None:
            heard.run_failed(run.project, reason)
    event(session, run.id, "phase", message, data, now)
    return new


def event(
    session: Session,
    run_id: str,
    kind: str,
    message: str,
    data: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> None:
    session.add(
        Event(run_id=run_id, kind=kind, message=message, data=data, at=now or datetime.now(UTC))
    )


def release_claim(
    session: Session, run: Run, claim: Claim | None, now: datetime | None = None
) -> None:
    """Give the run's devices back and count the GPU seconds they were held for the run: until
    the run ended (COMPLETED, FAILED, CANCELLED) when it ended before its job let them go."""
    if claim is None or claim.state == ClaimState.RELEASED:
        return
    now = now or datetime.now(UTC)
    if claim.state == ClaimState.GRANTED and claim.granted_at is not None:
        until = held_until(run, now)
        run.gpu_seconds = (run.gpu_seconds or 0.0) + max(
            0.0, (until - claim.granted_at).total_seconds()
        ) * claim.devices
    claim.state = ClaimState.RELEASED
    claim.released_at = now
    event(
        session,
        run.id,
        "claim",
        f"released {claim.devices} device(s) of pool {claim.pool}",
        None,
        now,
    )


def held_until(run: Run, now: datetime) -> datetime:
    """Where the GPU-seconds clock of a held claim stands: now, or the moment the run ended."""
    ended = run.ended_at
    if ended is None:
        return now
    if ended.tzinfo is None:
        ended = ended.replace(tzinfo=UTC)
    return min(now, ended)


def open_claim(session: Session, run: Run) -> Claim:
    claim = Claim(
        run_id=run.id, project=run.project, pool=run.pool, devices=run.gpus, state=ClaimState.QUEUED
    )
    session.add(claim)
    return claim


def current_claim(session: Session, run_id: str) -> Claim | None:
    """The run's open claim (queued or granted), if it has one."""
    return session.scalar(
        select(Claim)
        .where(Claim.run_id == run_id, Claim.state.in_(OPEN_CLAIM_STATES))
        .order_by(desc(Claim.id))
    )


# --- a task's claim (an evaluation claims devices like a run) -----------------------------------

TASK_CLAIM_KIND = "evaluation"


def open_task_claim(session: Session, task_id: str, project: str, pool: str, devices: int) -> Claim:
    """The QUEUED claim of a task on `devices` devices of `pool`; the task launches once the
    controller grants it."""
    claim = Claim(
        kind=TASK_CLAIM_KIND,
        run_id=None,
        task_id=task_id,
        project=project,
        pool=pool,
        devices=devices,
        device_ids=[],
        state=ClaimState.QUEUED,
    )
    session.add(claim)
    return claim


def task_claim(session: Session, task_id: str) -> Claim | None:
    """The task's open claim (queued or granted), if it has one."""
    return session.scalar(
        select(Claim)
        .where(Claim.task_id == task_id, Claim.state.in_(OPEN_CLAIM_STATES))
        .order_by(desc(Claim.id))
    )


def release_task_claim(session: Session, task_id: str, now: datetime | None = None) -> None:
    """The task's devices go back to its pool (when its job is gone, or never ran)."""
    claim = task_claim(session, task_id)
    if claim is None:
        return
    claim.state = ClaimState.RELEASED
    claim.released_at = now or datetime.now(UTC)
