"""A run's kept rollouts scored again with another reward definition, as a task on the cluster
(the task and its result are read at ``GET /v1/tasks/{id}``)."""

from __future__ import annotations

from fastapi import APIRouter

from akka_training.api.regrades import PipelinePreview, PreviewRequest, RegradeRequest
from akka_training.api.tasks import TaskRecord
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.openapi import errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import previews as previews_service
from akka_training.server.services import regrades as service

router = APIRouter(prefix="/v1/runs", route_class=SessionEndingRoute)


@router.post(
    "/{run_ref}/regrades",
    status_code=201,
    responses=errors(
        (400, "A bad run reference, or steps with no rollouts (the message lists the steps)."),
        401,
        403,
        (404, "There is no such run."),
        (409, "The run kept no rollouts (an sft run, or none yet)."),
        (422, "The reward was refused, with every problem (code plan-refused)."),
    ),
)
def regrade(run_ref: str, body: RegradeRequest, ctx: Ctx, db: Db, caller: Caller) -> TaskRecord:
    """Score the run's kept rollouts again with another reward, as a task on the cluster; the
    task to follow (``GET /v1/tasks/{id}``), whose result holds each step's old and new
    figures. The run is not changed."""
    task = service.start(db, caller, run_ref, body.reward, body.from_step, body.to_step)
    if ctx.controller is not None:
        ctx.controller.wake()
    return task


previews = APIRouter(prefix="/v1/previews", route_class=SessionEndingRoute)


@previews.post(
    "",
    status_code=201,
    responses=errors(
        (400, "The plan has no reward terms to preview."),
        401,
        403,
        (422, "The plan was refused, with every problem at once (code plan-refused)."),
    ),
)
def preview(body: PreviewRequest, ctx: Ctx, db: Db, caller: Caller) -> TaskRecord:
    """Check the plan as a dry run, then score a few of its dataset's rows (reference answers,
    an empty completion, the prompt) with its reward terms, as a task on the cluster; the task
    to follow (``GET /v1/tasks/{id}``). No run is started and no device claimed."""
    task = previews_service.start(db, ctx, caller, body.plan, body.rows)
    if ctx.controller is not None:
        ctx.controller.wake()
    return task


@previews.post(
    "/pipelines",
    status_code=201,
    responses=errors(
        (400, "The pipeline has no grpo or gspo stage to preview."),
        401,
        403,
        (422, "The pipeline was refused, with every problem at once (code plan-refused)."),
    ),
)
def preview_pipeline(body: PreviewRequest, ctx: Ctx, db: Db, caller: Caller) -> PipelinePreview:
    """Check the pipeline as a dry run, then score a few rows of each grpo or gspo stage's
    dataset with that stage's reward terms, one preview task per stage; the tasks to follow.
    No pipeline is started and no device claimed."""
    answer = previews_service.start_pipeline(db, ctx, caller, body.plan, body.rows)
    if ctx.controller is not None:
        ctx.controller.wake()
    return answer
