"""The one place a run's phase and its pending request change, and the events that tell of it.
Both the request path (`server.services`) and the controller move runs, so this lives below them
both.

Each change is decided on the run as read and written only over that (`rows.compare_and_set` on
the phase, the moment it was entered and the pending request): a move decided on a stale read
is refused with the phase as stored (`MovedMeanwhile`), never written over a newer one. Callers
that decide from what they read lock the run first (`lock_run`), so that they read it as stored
and nothing moves it before they commit.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from akka_training.core.failures import FailureReason, failure_text
from akka_training.core.phases import TERMINAL, Phase, RuleName, may_request, transition
from akka_training.core.rules import IllegalTransition, MovedMeanwhile
from akka_training.core.states import Request
from akka_training.storage import listeners
from akka_training.storage.models import Event, Run
from akka_training.storage.transitions.rows import compare_and_set, locked


def lock_run(session: Session, run_id: str) -> Run | None:
    """The run as stored, locked until this transaction ends (None if there is no such run)."""
    return locked(session, Run, run_id, Run.phase)


def move(
    session: Session,
    run: Run,
    rule: RuleName,
    *,
    reason: FailureReason | None = None,
    detail: str | None = None,
    request: Request | None = None,
    now: datetime | None = None,
) -> Phase:
    """Apply the named rule to `run`, account the time spent in the phase left, and record an
    event. `request`: what the run is asked to do in its new phase (a pause's checkpoint).

    Raises `IllegalTransition` (a `Conflict`) when the rule does not move a run from its phase,
    or when `request` may not take the place of the pending one; `MovedMeanwhile` when the run
    changed since it was read."""
    now = now or datetime.now(UTC)
    subject = f"Run {run.id}"
    old = Phase(run.phase)
    new = transition(old, rule, subject)
    if request is not None:
        check_request(run, request)
    seconds = dict(run.phase_seconds or {})
    seconds[old.value] = round(
        seconds.get(old.value, 0.0) + (now - run.phase_since).total_seconds(), 3
    )
    values: dict[str, Any] = {"phase": new.value, "phase_since": now, "phase_seconds": seconds}
    if new == Phase.PREPARING and run.started_at is None:
        values["started_at"] = now
    if new in TERMINAL:
        values["ended_at"] = now
    if new in TERMINAL or new in (Phase.PAUSED, Phase.QUEUED):
        values["requested"] = None
    if request is not None:
        values["requested"] = request.value
    if reason is not None:
        values["failure_code"] = reason.value
        values["failure_detail"] = detail
    _write(session, run, values, f"the rule {rule.value!r} was not applied")
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


def request(session: Session, run: Run, wanted: Request, now: datetime | None = None) -> bool:
    """Ask the open `run` for `wanted` (the controller does it); whether that changed anything
    (asking again for the pending request does not). A request takes the place of a weaker one
    only (`phases.may_request`): a pause never undoes a pending cancel.

    Raises `IllegalTransition` for an ended run or a request that may not replace the pending
    one, `MovedMeanwhile` when the run changed since it was read."""
    if run.requested == wanted:
        return False
    if Phase(run.phase) in TERMINAL:
        raise IllegalTransition(f"Run {run.id} is already {run.phase}.")
    check_request(run, wanted)
    _write(session, run, {"requested": wanted.value}, f"{wanted.value} was not asked")
    event(session, run.id, "request", f"{wanted.value} requested", None, now)
    return True


def check_request(run: Run, wanted: Request) -> None:
    """`IllegalTransition` when `wanted` may not take the place of the run's pending request (a
    pause never undoes a pending cancel)."""
    if may_request(run.requested, wanted):
        return
    asked = "a cancel" if wanted == Request.CANCEL else "a pause"
    if run.requested == Request.CANCEL:
        raise IllegalTransition(
            f"Run {run.id} is being cancelled; {asked} cannot undo the cancel asked before it."
        )
    raise IllegalTransition(
        f"Run {run.id} is pausing ({run.requested} asked); {asked} does not replace that."
    )


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


def held_until(run: Run, now: datetime) -> datetime:
    """Where the GPU-seconds clock of a held claim stands: now, or the moment the run ended."""
    ended = run.ended_at
    if ended is None:
        return now
    if ended.tzinfo is None:
        ended = ended.replace(tzinfo=UTC)
    return min(now, ended)


def _write(session: Session, run: Run, values: dict[str, Any], undone: str) -> None:
    """`values` written over the run's phase, the moment it entered it and its request as read,
    or `MovedMeanwhile` naming the phase as stored."""
    expected = {"phase": run.phase, "phase_since": run.phase_since, "requested": run.requested}
    if not compare_and_set(session, run, expected, values):
        pending = f" ({run.requested} asked)" if run.requested else ""
        raise MovedMeanwhile(
            f"Run {run.id} is now {run.phase}{pending}: it changed while this was being "
            f"decided, and {undone}."
        )
