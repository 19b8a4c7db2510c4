"""Tasks: jobs on the cluster that are not training runs (a merge), followed by their users and
reported by their jobs (task tokens only)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import WithJsonSchema

from akka_training.api.tasks import TASK_REPORTS, TaskDirective, TaskRecord
from akka_training.server.deps import Caller, Ctx, Db, Reporter
from akka_training.server.openapi import component, errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import tasks as service

router = APIRouter(prefix="/v1/tasks", route_class=SessionEndingRoute)

_LOOKUP = (401, 403, (404, "There is no such task."))

ReportDocument = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "description": "The task report of the kind the path names: "
            + ", ".join(f"{kind}: {model.__name__}" for kind, model in TASK_REPORTS.items())
            + ".",
            "oneOf": [component(model.__name__, model) for model in TASK_REPORTS.values()],
        }
    ),
]


@router.get("", responses=errors(401, 403))
def list_tasks(
    db: Db,
    caller: Caller,
    project: str | None = None,
    run: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
) -> list[TaskRecord]:
    """Tasks, newest first; `run` keeps those of one run."""
    return service.list_tasks(db, caller, project, run, limit)


@router.get("/{task_id}", responses=errors(*_LOOKUP))
def get(task_id: str, db: Db, caller: Caller) -> TaskRecord:
    return service.get(db, caller, task_id)


@router.post("/{task_id}/cancel", responses=errors(*_LOOKUP, (409, "The task already ended.")))
def cancel(task_id: str, ctx: Ctx, db: Db, caller: Caller) -> TaskRecord:
    answer = service.cancel(db, caller, task_id)
    if ctx.controller is not None:
        ctx.controller.wake()
    return answer


@router.post(
    "/{task_id}/reports/{kind}",
    responses=errors(
        (400, "There is no task report of that kind."),
        401,
        (403, "The token reports for another task."),
        (409, "The task is no longer running: stop."),
        (422, "The report was refused, with every problem (code plan-refused)."),
    ),
)
def report(
    task_id: str, kind: str, body: ReportDocument, ctx: Ctx, db: Db, caller: Reporter
) -> TaskDirective:
    answer = service.report(db, caller, task_id, kind, body)
    if kind in ("finished", "failed") and ctx.controller is not None:
        ctx.controller.wake()
    return answer
