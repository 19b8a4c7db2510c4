"""Reports from training jobs (job tokens only), and the one exchange of a job's bootstrap
credential for its token."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import WithJsonSchema

from akka_training.api.jobs import REPORTS, Directive, JobCredentials
from akka_training.server.auth import bearer
from akka_training.server.deps import Ctx, Db, Reporter
from akka_training.server.openapi import component, errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import job_credentials
from akka_training.server.services import jobs as service

router = APIRouter(prefix="/v1/jobs", route_class=SessionEndingRoute)

# The body of each report kind (the last path segment), parsed by the service.
ReportDocument = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "description": "The report of the kind the path names: "
            + ", ".join(f"{kind}: {model.__name__}" for kind, model in REPORTS.items())
            + ".",
            "oneOf": [component(model.__name__, model) for model in REPORTS.values()],
        }
    ),
]


@router.post(
    "/bootstrap",
    responses=errors(
        (401, "The bootstrap credential is unknown, already exchanged or expired."),
        (409, "The job's attempt or task has ended: stop."),
    ),
)
def bootstrap(request: Request, ctx: Ctx, db: Db) -> JobCredentials:
    """A job's token and the store's credentials, for its bootstrap credential (the bearer), once."""
    return job_credentials.exchange(db, ctx.settings, bearer(request), ctx.clock.now())


@router.post(
    "/{run_id}/attempts/{attempt}/{kind}",
    responses=errors(
        (400, "There is no report of that kind."),
        401,
        (403, "The token reports for another run or attempt."),
        (409, "The attempt is no longer the run's current one: stop."),
        (422, "The report was refused, with every problem (code plan-refused)."),
    ),
)
def report(
    run_id: str, attempt: int, kind: str, body: ReportDocument, ctx: Ctx, db: Db, caller: Reporter
) -> Directive:
    answer = service.handle(db, caller, run_id, attempt, kind, body)
    if kind in ("finished", "stopped", "failed") and ctx.controller is not None:
        ctx.controller.wake()
    return answer
