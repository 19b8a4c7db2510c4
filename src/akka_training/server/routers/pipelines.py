"""Pipelines."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.services import pipelines as service

router = APIRouter(prefix="/v1/pipelines")


@router.post("")
def start(
    body: dict[str, Any], ctx: Ctx, db: Db, caller: Caller, dry_run: bool = False
) -> dict[str, Any]:
    result = service.start(db, ctx, caller, body, dry_run)
    if not dry_run and ctx.controller is not None:
        ctx.controller.wake()
    return result


@router.get("")
def list_pipelines(
    ctx: Ctx, db: Db, caller: Caller, project: str | None = None
) -> list[dict[str, Any]]:
    return service.list_pipelines(db, ctx, caller, project)


@router.get("/{ref}")
def get(ref: str, ctx: Ctx, db: Db, caller: Caller) -> dict[str, Any]:
    return service.get(db, ctx, caller, ref)


@router.post("/{ref}/cancel")
def cancel(ref: str, ctx: Ctx, db: Db, caller: Caller) -> dict[str, Any]:
    return service.cancel(db, ctx, caller, ref)


@router.post("/{ref}/resume")
def resume(ref: str, ctx: Ctx, db: Db, caller: Caller) -> dict[str, Any]:
    result = service.resume(db, ctx, caller, ref)
    if ctx.controller is not None:
        ctx.controller.wake()
    return result


@router.get("/{ref}/wait")
def wait(ref: str, ctx: Ctx, caller: Caller, timeout: float | None = None) -> StreamingResponse:
    """Line-delimited JSON: the pipeline each time a stage changes, ending with its final state."""
    return StreamingResponse(
        service.wait_lines(ctx, caller, ref, timeout), media_type="application/x-ndjson"
    )
