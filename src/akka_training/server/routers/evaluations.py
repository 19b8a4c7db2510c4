"""Evaluations: an adapter (or a base model) scored on a held-out dataset."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import WithJsonSchema

from akka_training.api.evaluations import (
    EvaluationDryRun,
    EvaluationPlan,
    EvaluationRecord,
    EvaluationSamples,
)
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.openapi import component, errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import evaluations as service

router = APIRouter(prefix="/v1/evaluations", route_class=SessionEndingRoute)

# The plan is parsed by the service, which refuses it with every problem at once (422).
PlanDocument = Annotated[
    dict[str, Any], WithJsonSchema(component("EvaluationPlan", EvaluationPlan))
]
_LOOKUP = (401, 403, (404, "There is no such evaluation."))


@router.post(
    "",
    responses=errors(
        401, 403, (422, "The plan was refused, with every problem at once (code plan-refused).")
    ),
)
def start(
    body: PlanDocument, ctx: Ctx, db: Db, caller: Caller, dry_run: bool = False
) -> EvaluationRecord | EvaluationDryRun:
    answer = service.start(db, ctx, caller, body, dry_run)
    if not dry_run and ctx.controller is not None:
        ctx.controller.wake()
    return answer


@router.get("", responses=errors(401, 403))
def list_evaluations(
    db: Db, caller: Caller, project: str | None = None, limit: int = Query(100, ge=1, le=1000)
) -> list[EvaluationRecord]:
    """Evaluations, newest first."""
    return service.list_evaluations(db, caller, project, limit)


@router.get("/{evaluation_id}", responses=errors(*_LOOKUP))
def get(evaluation_id: str, ctx: Ctx, db: Db, caller: Caller) -> EvaluationRecord:
    """The evaluation; while it waits for devices, `queue` says what for."""
    return service.get(db, ctx, caller, evaluation_id)


@router.post(
    "/{evaluation_id}/cancel", responses=errors(*_LOOKUP, (409, "The evaluation already ended."))
)
def cancel(evaluation_id: str, ctx: Ctx, db: Db, caller: Caller) -> EvaluationRecord:
    answer = service.cancel(db, caller, evaluation_id)
    if ctx.controller is not None:
        ctx.controller.wake()
    return answer


@router.get("/{evaluation_id}/samples", responses=errors(*_LOOKUP))
def samples(
    evaluation_id: str,
    ctx: Ctx,
    db: Db,
    caller: Caller,
    order: Literal["worst", "best"] = "worst",
    metric: str | None = None,
    limit: int = Query(20, ge=1, le=10000),
) -> EvaluationSamples:
    """The scored samples, worst (or best) first by score, or by one metric's value."""
    return service.samples(db, ctx, caller, evaluation_id, order, metric, limit)
