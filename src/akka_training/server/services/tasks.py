"""Tasks: submitting one (for the service's own requests, such as a merge), reading and
cancelling them, and the reports of their jobs. The controller launches and watches them
(`controller/tasks.py`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import desc, select
from sqlalchemy.orm import Session

from akka_training.api.tasks import TaskDirective, TaskProgress, TaskRecord
from akka_training.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from akka_training.core.parsing import parse_model
from akka_training.core.serving import SERVE
from akka_training.core.states import TERMINAL_TASK_STATES, Request, TaskRule, TaskState
from akka_training.core.tasks import (
    TASK_REPORTS,
    TaskAction,
    TaskFailedReport,
    TaskFinishedReport,
    TaskProgressReport,
    TaskStartedReport,
)
from akka_training.server.auth import Principal
from akka_training.storage.ids import new_id
from akka_training.storage.models import Task
from akka_training.storage.transitions import (
    lock_task,
    move_task,
    release_task_claim,
    request_cancel,
)


def submit(
    session: Session,
    *,
    kind: str,
    project: str,
    pool: str,
    params: dict[str, Any],
    run_id: str | None = None,
    key: str | None = None,
) -> Task:
    """A new PENDING task; the controller launches it on its next pass."""
    task = Task(
        id=new_id("tk"),
        kind=kind,
        project=project,
        run_id=run_id,
        key=key,
        pool=pool,
        params=params,
        state=TaskState.PENDING,
        created_at=datetime.now(UTC),
    )
    session.add(task)
    session.flush()
    return task


def current(session: Session, key: str) -> Task | None:
    """The newest task making `key` that has not failed or been cancelled."""
    return session.scalar(
        select(Task)
        .where(Task.key == key, Task.state.not_in([TaskState.FAILED, TaskState.CANCELLED]))
        .order_by(desc(Task.created_at))
        .limit(1)
    )


def get(session: Session, principal: Principal, task_id: str) -> TaskRecord:
    return task_record(task_for(session, principal, task_id))


def list_tasks(
    session: Session,
    principal: Principal,
    project: str | None,
    run_id: str | None,
    limit: int,
) -> list[TaskRecord]:
    query = select(Task).order_by(desc(Task.created_at)).limit(limit)
    if project:
        principal.require(project)
        query = query.where(Task.project == project)
    elif principal.projects is not None:
        query = query.where(Task.project.in_(principal.projects))
    if run_id:
        query = query.where(Task.run_id == run_id)
    return [task_record(t) for t in session.scalars(query)]


def cancel(session: Session, principal: Principal, task_id: str) -> TaskRecord:
    task = task_for(session, principal, task_id)
    stored = lock_task(session, task.id)
    if stored is None:
        raise NotFound(f"There is no task {task_id!r}.")
    task = stored
    if task.state in TERMINAL_TASK_STATES:
        raise Conflict(f"Task {task.id} is already {task.state}.")
    if task.state == TaskState.PENDING and task.handle is None:
        move_task(session, task, TaskRule.CANCEL)
        # No job ever ran: its claim (an evaluation's devices) goes back at once.
        release_task_claim(session, task.id, task.ended_at)
    else:
        # The controller stops the job and ends the task once the job is gone.
        request_cancel(session, task)
    return task_record(task)


def task_for(session: Session, principal: Principal, task_id: str) -> Task:
    """A task of the projects `principal` may read; another project's answers as one that does
    not exist."""
    principal.refuse_reporters()
    task = session.get(Task, task_id)
    if task is None or not principal.can(task.project):
        raise NotFound(f"There is no task {task_id!r}.")
    return task


def report(
    session: Session, principal: Principal, task_id: str, kind: str, body: dict[str, Any]
) -> TaskDirective:
    """A report of the task's job; the directive it is answered with."""
    if principal.kind != "task" or principal.task_id != task_id:
        raise Forbidden("This token reports for another task.")
    model = TASK_REPORTS.get(kind)
    if model is None:
        raise InvalidRequest(
            f"There is no task report {kind!r}; reports: {', '.join(TASK_REPORTS)}."
        )
    parsed = parse_model(model, body)
    task = lock_task(session, task_id)
    if task is None:
        raise Conflict("This task is not known to the trainer.")
    if task.state in TERMINAL_TASK_STATES or task.reported:
        raise Conflict(f"Task {task_id} is {task.state}; stop.")
    now = datetime.now(UTC)
    task.heartbeat_at = now
    if isinstance(parsed, TaskStartedReport):
        task.started_at = now
        task.placement = parsed.placement.to_json()
    elif isinstance(parsed, TaskProgressReport):
        task.progress = parsed.to_json()
    elif isinstance(parsed, TaskFinishedReport):
        task.result = parsed.result
        task.reported = True
        move_task(session, task, TaskRule.SUCCEED, now=now)
    elif isinstance(parsed, TaskFailedReport):
        task.last_error = parsed.detail
        task.reported = True
        move_task(session, task, TaskRule.FAIL, failure=parsed.message, now=now)
    action: TaskAction = "stop" if task.requested == Request.CANCEL else "continue"
    if task.kind == SERVE and isinstance(parsed, TaskProgressReport):
        # An endpoint's job loads and drops adapters as its parameters change.
        return TaskDirective(action=action, params=task.params)
    return TaskDirective(action=action)


def task_record(task: Task) -> TaskRecord:
    return TaskRecord(
        id=task.id,
        kind=task.kind,
        project=task.project,
        run=task.run_id,
        state=task.state,
        requested=task.requested,
        pool=task.pool,
        progress=progress_view(task.progress),
        result=task.result,
        failure=task.failure,
        failure_detail=task.last_error if task.state == TaskState.FAILED else None,
        created_at=task.created_at,
        started_at=task.started_at,
        ended_at=task.ended_at,
    )


def progress_view(progress: dict[str, Any] | None) -> TaskProgress | None:
    """The progress a user reads (an endpoint's address and key are the front door's, not
    theirs)."""
    if not progress:
        return None
    hidden = ("address", "key", "engine")
    return TaskProgress.model_validate({k: v for k, v in progress.items() if k not in hidden})
