"""Tasks: launched, ended and asked to cancel only through `move_task` and `request_cancel`,
under the named rules of `core.states.TASK_RULES`, over the state as stored. A task that ends
takes its token with it (a late report is told to stop)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from akka_training.core.rules import IllegalTransition, MovedMeanwhile
from akka_training.core.states import TASK_RULES, TERMINAL_TASK_STATES, Request, TaskRule, TaskState
from akka_training.storage.models import Task
from akka_training.storage.tokens import revoke_task_tokens
from akka_training.storage.transitions.rows import compare_and_set, locked


def lock_task(session: Session, task_id: str) -> Task | None:
    """The task as stored, locked until this transaction ends (None if there is no such task)."""
    return locked(session, Task, task_id, Task.state)


def move_task(
    session: Session,
    task: Task,
    rule: TaskRule,
    *,
    failure: str | None = None,
    detail: str | None = None,
    now: datetime | None = None,
) -> TaskState:
    """Apply the named rule to `task`. A task that ends (SUCCEEDED, FAILED, CANCELLED) keeps
    `failure` (the sentence) and `detail`, drops its pending request and revokes its token.
    Raises `IllegalTransition` (a `Conflict`) when the rule does not move a task from its state,
    `MovedMeanwhile` when the task changed since it was read."""
    now = now or datetime.now(UTC)
    new = TASK_RULES.target(task.state, rule, f"Task {task.id}")
    values: dict[str, Any] = {"state": new.value}
    if new in TERMINAL_TASK_STATES:
        values.update(ended_at=now, requested=None)
        if failure is not None:
            values["failure"] = failure
        if detail is not None:
            values["last_error"] = detail
    _write(session, task, {"state": task.state}, values, f"the rule {rule.value!r}")
    if new in TERMINAL_TASK_STATES:
        revoke_task_tokens(session, task.id, now)
    return new


def request_cancel(session: Session, task: Task) -> bool:
    """Ask the open task's job to stop (the controller ends the task once it is gone); whether
    that changed anything."""
    if task.requested == Request.CANCEL:
        return False
    if task.state in TERMINAL_TASK_STATES:
        raise IllegalTransition(f"Task {task.id} is already {task.state}.")
    expected = {"state": task.state, "requested": task.requested}
    _write(session, task, expected, {"requested": Request.CANCEL.value}, "the cancel")
    return True


def _write(
    session: Session, task: Task, expected: dict[str, Any], values: dict[str, Any], what: str
) -> None:
    if not compare_and_set(session, task, expected, values):
        raise MovedMeanwhile(
            f"Task {task.id} is now {task.state}: it changed while this was being decided, "
            f"and {what} was not applied."
        )
