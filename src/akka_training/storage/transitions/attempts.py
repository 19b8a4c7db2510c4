"""Attempts: one execution of a run's job, launched and exited only by `move_attempt` under the
named rules of `core.states.ATTEMPT_RULES`, over the state as stored; and how it ended, as its
job reported it (`record_outcome`, once)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from akka_training.core.rules import IllegalTransition, MovedMeanwhile
from akka_training.core.states import ATTEMPT_RULES, AttemptOutcome, AttemptRule, AttemptState
from akka_training.storage.models import Attempt
from akka_training.storage.transitions.rows import compare_and_set


def move_attempt(
    session: Session,
    attempt: Attempt,
    rule: AttemptRule,
    *,
    handle: dict[str, Any] | None = None,
    outcome: AttemptOutcome | None = None,
    now: datetime | None = None,
) -> AttemptState:
    """Apply the named rule to `attempt`: LAUNCH records the backend's `handle`; EXIT records
    `outcome` unless its job reported one. Raises `IllegalTransition` when the rule does not
    move an attempt from its state, `MovedMeanwhile` when it changed since it was read."""
    now = now or datetime.now(UTC)
    subject = f"Attempt {attempt.number} of run {attempt.run_id}"
    new = ATTEMPT_RULES.target(attempt.state, rule, subject)
    values: dict[str, Any] = {"state": new.value}
    if new == AttemptState.LAUNCHED:
        values.update(handle=handle, launched_at=now)
    if new == AttemptState.EXITED:
        values.update(ended_at=now, outcome=attempt.outcome or outcome)
    expected = {"state": attempt.state, "outcome": attempt.outcome}
    if not compare_and_set(session, attempt, expected, values):
        raise MovedMeanwhile(
            f"{subject} is now {attempt.state}: it changed while this was being decided, and "
            f"the rule {rule.value!r} was not applied."
        )
    return new


def record_outcome(session: Session, attempt: Attempt, outcome: AttemptOutcome) -> None:
    """How the attempt ended, as its job reported it: once (`IllegalTransition` after that)."""
    subject = f"Attempt {attempt.number} of run {attempt.run_id}"
    if attempt.outcome is not None:
        raise IllegalTransition(f"{subject} has already ended ({attempt.outcome}).")
    if not compare_and_set(session, attempt, {"outcome": None}, {"outcome": outcome.value}):
        raise MovedMeanwhile(f"{subject} has ended meanwhile ({attempt.outcome}).")
