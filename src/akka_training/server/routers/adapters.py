"""A run's adapter and merged model, in the Hugging Face layout: the manifest of the files,
each file streamed on its own, and the merge that makes a merged model (a task)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import StreamingResponse

from akka_training.api.adapters import AdapterManifest, MergeRequest
from akka_training.api.tasks import TaskRecord
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.openapi import errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import adapters as service

router = APIRouter(prefix="/v1/runs", route_class=SessionEndingRoute)

_NO_FILES = (
    409,
    "There is nothing to download yet: the run has no final adapter (queued, training, failed "
    "before its first save), or its merge is still running; the message says what to do.",
)
_LOOKUP = errors(
    (400, "A bad run reference, or a pipeline's id (the message lists its stages' runs)."),
    401,
    403,
    (404, "There is no such run, snapshot, file, or merged model."),
    _NO_FILES,
)
_BINARY: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The file's bytes, streamed.",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.get("/{run_ref}/adapter", responses=_LOOKUP)
def adapter(run_ref: str, ctx: Ctx, caller: Caller, snapshot: str | None = None) -> AdapterManifest:
    """The files of the run's final adapter (or of a snapshot's weights) with their sizes and
    sha256; fetch each from ``adapter/files/{path}``."""
    return service.manifest(ctx, caller, run_ref, snapshot, "adapter")


@router.get(
    "/{run_ref}/adapter/files/{path:path}",
    response_class=StreamingResponse,
    responses={**_BINARY, **_LOOKUP},
)
def adapter_file(
    run_ref: str, path: str, ctx: Ctx, caller: Caller, snapshot: str | None = None
) -> Response:
    return _stream(ctx, caller, run_ref, snapshot, "adapter", path)


@router.post(
    "/{run_ref}/merged",
    status_code=201,
    responses={
        200: {"model": TaskRecord, "description": "The merge asked for before (running or done)."},
        **errors(
            (400, "A bad run reference, or a pipeline's id."),
            401,
            403,
            (404, "There is no such run or snapshot."),
            (
                409,
                "The run has no final adapter yet, or the base model's weights are not "
                "available to the cluster.",
            ),
        ),
    },
)
def merge(
    run_ref: str, body: MergeRequest, ctx: Ctx, db: Db, caller: Caller, response: Response
) -> TaskRecord:
    """Merge the run's adapter into its base model, as a task on the cluster; the task to follow
    (``GET /v1/tasks/{id}``). Asking again answers the same task (200)."""
    task, created = service.export_merged(db, ctx, caller, run_ref, body.snapshot)
    if created:
        _wake(ctx)
    else:
        response.status_code = 200
    return task


@router.get("/{run_ref}/merged", responses=_LOOKUP)
def merged(run_ref: str, ctx: Ctx, caller: Caller, snapshot: str | None = None) -> AdapterManifest:
    """The files of the merged model a merge task made, with their sizes and sha256."""
    return service.manifest(ctx, caller, run_ref, snapshot, "merged")


@router.get(
    "/{run_ref}/merged/files/{path:path}",
    response_class=StreamingResponse,
    responses={**_BINARY, **_LOOKUP},
)
def merged_file(
    run_ref: str, path: str, ctx: Ctx, caller: Caller, snapshot: str | None = None
) -> Response:
    return _stream(ctx, caller, run_ref, snapshot, "merged", path)


def _stream(
    ctx: AppContext,
    caller: Principal,
    run_ref: str,
    snapshot: str | None,
    kind: service.Kind,
    path: str,
) -> Response:
    chunks, size = service.open_file(ctx, caller, run_ref, snapshot, kind, path)
    return StreamingResponse(
        chunks,
        media_type="application/octet-stream",
        headers={"Content-Length": str(size)},
    )


def _wake(ctx: AppContext) -> None:
    if ctx.controller is not None:
        ctx.controller.wake()
