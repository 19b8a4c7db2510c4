"""Pipelines."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import WithJsonSchema

from akka_training.api.pipelines import Pipeline, PipelineDryRun, PipelinePlan, PipelineWaitLine
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.openapi import NDJSON, component, errors, lines
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import pipelines as service

router = APIRouter(prefix="/v1/pipelines", route_class=SessionEndingRoute)

# The plan is parsed by the service, which refuses it with every problem of every stage (422).
PipelineDocument = Annotated[
    dict[str, Any], WithJsonSchema(component("PipelinePlan", PipelinePlan))
]

_LOOKUP = (
    (400, "The reference matches several pipelines."),
    401,
    403,
    (404, "There is no such pipeline."),
)


@router.post(
    "",
    responses=errors(
        (400, "Not a pipeline plan (a run plan, or not a mapping)."),
        401,
        403,
        (409, "A pipeline with this submissionId is being started."),
        (422, "The plan was refused, with every problem of every stage (code plan-refused)."),
    ),
)
def start(
    body: PipelineDocument, ctx: Ctx, db: Db, caller: Caller, dry_run: bool = False
) -> Pipeline | PipelineDryRun:
    result = service.start(db, ctx, caller, body, dry_run)
    if not dry_run and ctx.controller is not None:
        ctx.controller.wake()
    return result


@router.get("", responses=errors(401, 403))
def list_pipelines(ctx: Ctx, db: Db, caller: Caller, project: str | None = None) -> list[Pipeline]:
    return service.list_pipelines(db, ctx, caller, project)


@router.get("/{ref}", responses=errors(*_LOOKUP))
def get(ref: str, ctx: Ctx, db: Db, caller: Caller) -> Pipeline:
    return service.get(db, ctx, caller, ref)


@router.post("/{ref}/cancel", responses=errors(*_LOOKUP, (409, "The pipeline already ended.")))
def cancel(ref: str, ctx: Ctx, db: Db, caller: Caller) -> Pipeline:
    return service.cancel(db, ctx, caller, ref)


@router.post(
    "/{ref}/resume",
    responses=errors(*_LOOKUP, (409, "Only a failed or cancelled pipeline resumes.")),
)
def resume(ref: str, ctx: Ctx, db: Db, caller: Caller) -> Pipeline:
    result = service.resume(db, ctx, caller, ref)
    if ctx.controller is not None:
        ctx.controller.wake()
    return result


@router.get(
    "/{ref}/wait",
    response_class=StreamingResponse,
    responses={
        **lines(
            "PipelineWaitLine",
            PipelineWaitLine,
            "One JSON object a line: the pipeline each time a stage changes, ending with its "
            "final state (type pipeline).",
        ),
        **errors(*_LOOKUP),
    },
)
def wait(
    ref: str,
    ctx: Ctx,
    caller: Caller,
    # A .nan would never compare past the deadline and hold the stream open for good.
    timeout: float | None = Query(None, ge=0, allow_inf_nan=False),
) -> StreamingResponse:
    """Line-delimited JSON: the pipeline each time a stage changes, ending with its final state."""
    return StreamingResponse(service.wait_lines(ctx, caller, ref, timeout), media_type=NDJSON)
