"""Claims: a run's (or an evaluation's) devices asked for, granted and given back, moved only by
`move_claim` under the named rules of `core.states.CLAIM_RULES`, over the state as stored."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import desc, select
from sqlalchemy.orm import Session

from akka_training.core.rules import MovedMeanwhile
from akka_training.core.states import CLAIM_RULES, OPEN_CLAIM_STATES, ClaimRule, ClaimState
from akka_training.storage.models import Claim, Run
from akka_training.storage.transitions.rows import compare_and_set
from akka_training.storage.transitions.runs import event, held_until

# The kind of a task's claim (an evaluation claims devices like a run).
TASK_CLAIM_KIND = "evaluation"


def move_claim(
    session: Session,
    claim: Claim,
    rule: ClaimRule,
    *,
    device_ids: list[int] | None = None,
    now: datetime | None = None,
) -> ClaimState:
    """Apply the named rule to `claim` (GRANT takes the `device_ids` granted). Raises
    `IllegalTransition` when the rule does not move a claim from its state, `MovedMeanwhile`
    when the claim changed since it was read."""
    now = now or datetime.now(UTC)
    new = CLAIM_RULES.target(claim.state, rule, f"Claim {claim.id}")
    values: dict[str, Any] = {"state": new.value}
    if new == ClaimState.GRANTED:
        values.update(device_ids=list(device_ids or []), granted_at=now)
    if new == ClaimState.RELEASED:
        values["released_at"] = now
    if not compare_and_set(session, claim, {"state": claim.state}, values):
        raise MovedMeanwhile(
            f"Claim {claim.id} is now {claim.state}: it changed while this was being decided, "
            f"and the rule {rule.value!r} was not applied."
        )
    return new


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


def release_claim(
    session: Session, run: Run, claim: Claim | None, now: datetime | None = None
) -> None:
    """Give the run's devices back and count the GPU seconds they were held for the run: until
    the run ended (COMPLETED, FAILED, CANCELLED) when it ended before its job let them go. A
    claim granted meanwhile is released as granted; one released meanwhile stays as it is."""
    if claim is None:
        return
    now = now or datetime.now(UTC)
    for _ in ClaimState:  # each try finds the claim further along: QUEUED, GRANTED, RELEASED
        if claim.state == ClaimState.RELEASED:
            return
        granted_at = claim.granted_at if claim.state == ClaimState.GRANTED else None
        try:
            move_claim(session, claim, ClaimRule.RELEASE, now=now)
        except MovedMeanwhile:
            continue  # `claim` is as stored now
        if granted_at is not None:
            held = max(0.0, (held_until(run, now) - granted_at).total_seconds())
            run.gpu_seconds = (run.gpu_seconds or 0.0) + held * claim.devices
        event(
            session,
            run.id,
            "claim",
            f"released {claim.devices} device(s) of pool {claim.pool}",
            None,
            now,
        )
        return


# --- a task's claim (an evaluation claims devices like a run) -----------------------------------


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
    now = now or datetime.now(UTC)
    for _ in ClaimState:
        if claim is None or claim.state == ClaimState.RELEASED:
            return
        try:
            move_claim(session, claim, ClaimRule.RELEASE, now=now)
            return
        except MovedMeanwhile:
            continue
