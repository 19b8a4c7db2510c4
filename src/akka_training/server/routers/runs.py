"""Runs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import WithJsonSchema

from akka_training.api.rollouts import StepRollouts
from akka_training.api.runs import (
    DeriveRequest,
    DryRun,
    JobLogs,
    Metrics,
    PauseRequest,
    RunPlan,
    RunRecord,
    RunSummary,
    RunTree,
    RunWaitLine,
    Snapshot,
)
from akka_training.api.tasks import TaskRecord
from akka_training.core.limits import INT32_MAX
from akka_training.deployment.context import AppContext
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.openapi import NDJSON, component, errors, lines
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import rollouts as rollouts_service
from akka_training.server.services import runs as service
from akka_training.server.services import verification as verification_service

router = APIRouter(prefix="/v1/runs", route_class=SessionEndingRoute)

# The plan is parsed by the service, which refuses it with every problem at once (422).
PlanDocument = Annotated[dict[str, Any], WithJsonSchema(component("RunPlan", RunPlan))]

_REFUSED = (422, "The plan was refused, with every problem at once (code plan-refused).")
# A run reference: an id or an unambiguous prefix of one.
_LOOKUP = (400, 401, 403, (404, "There is no such run."))


@router.post(
    "",
    responses=errors(
        (400, "Not a run plan (a pipeline plan, or not a mapping)."), 401, 403, _REFUSED
    ),
)
def start(
    body: PlanDocument, ctx: Ctx, db: Db, caller: Caller, dry_run: bool = False
) -> RunRecord | DryRun:
    result = service.start(db, ctx, caller, body, dry_run)
    if not dry_run:
        _wake(ctx)
    return result


@router.get("", responses=errors((400, "limit out of range, or an unknown phase."), 401, 403))
def list_runs(
    ctx: Ctx,
    db: Db,
    caller: Caller,
    project: str | None = None,
    phase: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
) -> list[RunSummary]:
    return service.list_runs(db, ctx, caller, project, phase, limit)


@router.get("/{run_ref}", responses=errors(*_LOOKUP))
def get(run_ref: str, ctx: Ctx, db: Db, caller: Caller) -> RunRecord:
    return service.get(db, ctx, caller, run_ref)


@router.post("/{run_ref}/cancel", responses=errors(*_LOOKUP, (409, "The run already ended.")))
def cancel(run_ref: str, ctx: Ctx, db: Db, caller: Caller) -> RunRecord:
    result = service.cancel(db, ctx, caller, run_ref)
    _wake(ctx)
    return result


@router.post("/{run_ref}/pause", responses=errors(*_LOOKUP, (409, "The run already ended.")))
def pause(run_ref: str, body: PauseRequest, ctx: Ctx, db: Db, caller: Caller) -> RunRecord:
    result = service.pause(db, ctx, caller, run_ref, body.checkpoint)
    _wake(ctx)
    return result


@router.post("/{run_ref}/resume", responses=errors(*_LOOKUP, (409, "The run is not PAUSED.")))
def resume(run_ref: str, ctx: Ctx, db: Db, caller: Caller) -> RunRecord:
    result = service.resume(db, ctx, caller, run_ref)
    _wake(ctx)
    return result


_DERIVE_ERRORS = errors(
    400, 401, 403, (404, "There is no such run, or it has no such snapshot."), _REFUSED
)


@router.post("/{run_ref}/branch", responses=_DERIVE_ERRORS)
def branch(
    run_ref: str, body: DeriveRequest, ctx: Ctx, db: Db, caller: Caller
) -> RunRecord | DryRun:
    return _derive(ctx, db, caller, run_ref, body, "weights")


@router.post("/{run_ref}/continue", responses=_DERIVE_ERRORS)
def continue_(
    run_ref: str, body: DeriveRequest, ctx: Ctx, db: Db, caller: Caller
) -> RunRecord | DryRun:
    return _derive(ctx, db, caller, run_ref, body, "trainingState")


@router.get("/{run_ref}/snapshots", responses=errors(*_LOOKUP))
def snapshots(run_ref: str, db: Db, caller: Caller) -> list[Snapshot]:
    return service.snapshots(db, caller, run_ref)


@router.get("/{run_ref}/metrics", responses=errors(*_LOOKUP))
def metrics(run_ref: str, db: Db, caller: Caller, fields: str | None = None) -> Metrics:
    wanted = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
    return service.metrics(db, caller, run_ref, wanted)


@router.get(
    "/{run_ref}/rollouts",
    responses=errors(
        (400, "A bad run reference, order or limit."),
        401,
        403,
        (404, "There is no such run, or it kept no rollouts at that step."),
    ),
)
def rollouts(
    run_ref: str,
    ctx: Ctx,
    db: Db,
    caller: Caller,
    step: int | None = None,
    order: str | None = None,
    limit: int | None = Query(None, ge=1),
) -> StepRollouts:
    return rollouts_service.rollouts(db, ctx, caller, run_ref, step, order, limit)


@router.post(
    "/{run_ref}/verifications",
    status_code=201,
    responses=errors(
        (400, "A bad run reference, or a run that keeps no rollouts (sft)."),
        401,
        403,
        (404, "There is no such run."),
        (409, "No step of the run has both its report and its rollouts in yet."),
    ),
)
def verification(run_ref: str, ctx: Ctx, db: Db, caller: Caller) -> TaskRecord:
    """Check every step's published figures against the rollouts the run kept, counted again,
    and those rollouts against the run's reward, scored again, as a task on the cluster; the
    task to follow (``GET /v1/tasks/{id}``), whose result lists each figure and rollout that
    differs. The run is not changed."""
    task = verification_service.start(db, caller, run_ref)
    if ctx.controller is not None:
        ctx.controller.wake()
    return task


@router.get("/{run_ref}/tree", responses=errors(*_LOOKUP))
def tree(run_ref: str, db: Db, caller: Caller) -> RunTree:
    return service.tree(db, caller, run_ref)


@router.get("/{run_ref}/logs", responses=errors(*_LOOKUP, 503))
def logs(
    run_ref: str,
    ctx: Ctx,
    caller: Caller,
    offset: int = Query(0, ge=0),
    attempt: int | None = Query(None, ge=0, le=INT32_MAX),
) -> JobLogs:
    return service.logs(ctx, caller, run_ref, offset, attempt)


@router.get(
    "/{run_ref}/wait",
    response_class=StreamingResponse,
    responses={
        **lines(
            "RunWaitLine",
            RunWaitLine,
            "One JSON object a line: the run's events and progress as they happen, ending "
            "with the full record (type run).",
        ),
        **errors(*_LOOKUP),
    },
)
def wait(
    run_ref: str,
    ctx: Ctx,
    caller: Caller,
    # A .nan would never compare past the deadline and hold the stream open for good.
    timeout: float | None = Query(None, ge=0, allow_inf_nan=False),
    until: str = "end",
) -> StreamingResponse:
    """Line-delimited JSON: the run's events as they happen, ending with the full record once
    the run ends (or pauses, with until=rest), or at the timeout."""
    return StreamingResponse(
        service.wait_lines(ctx, caller, run_ref, timeout, until), media_type=NDJSON
    )


def _derive(
    ctx: AppContext, db: Db, caller: Caller, run_ref: str, body: DeriveRequest, restore: str
) -> RunRecord | DryRun:
    result = service.derive(
        db, ctx, caller, run_ref, body.snapshot, restore, body.steps, body.overrides, body.dry_run
    )
    _wake(ctx)
    return result


def _wake(ctx: AppContext) -> None:
    if ctx.controller is not None:
        ctx.controller.wake()
