"""Pipelines."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.services import pipelines as service
from akka_training.server.services.lookups import pipeline_for
from akka_training.storage.models import Pipeline

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
def wait(
    ref: str, ctx: Ctx, db: Db, caller: Caller, timeout: float | None = None
) -> StreamingResponse:
    """Line-delimited JSON: the pipeline each time a stage changes, ending with its final state."""
    pipeline_id = pipeline_for(db, caller, ref).id

    def lines() -> Iterator[bytes]:
        last = None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with ctx.db.session() as session:
                row = session.get(Pipeline, pipeline_id)
                assert row is not None
                body = service.pipeline_json(session, ctx, row)
            stages = [(s["name"], s["run"], s["phase"]) for s in body["stages"]]
            ended = body["state"] != "RUNNING"
            timed_out = deadline is not None and time.monotonic() > deadline
            if ended or timed_out:
                yield (
                    json.dumps(
                        {"type": "pipeline", "timedOut": timed_out and not ended, "pipeline": body}
                    )
                    + "\n"
                ).encode()
                return
            if stages != last:
                last = stages
                yield (json.dumps({"type": "progress", "pipeline": body}) + "\n").encode()
            time.sleep(0.5)

    return StreamingResponse(lines(), media_type="application/x-ndjson")
