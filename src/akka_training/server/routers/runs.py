"""Runs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.services import rollouts as rollouts_service
from akka_training.server.services import runs as service

router = APIRouter(prefix="/v1/runs")


class PauseBody(BaseModel):
    checkpoint: str = "save"


class DeriveBody(BaseModel):
    snapshot: str
    steps: int | None = None
    overrides: dict[str, Any] | None = None
    dryRun: bool = False


@router.post("")
def start(
    body: dict[str, Any], ctx: Ctx, db: Db, caller: Caller, dry_run: bool = False
) -> dict[str, Any]:
    result = service.start(db, ctx, caller, body, dry_run)
    if not dry_run and ctx.controller is not None:
        ctx.controller.wake()
    return result


@router.get("")
def list_runs(
    ctx: Ctx,
    db: Db,
    caller: Caller,
    project: str | None = None,
    phase: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
) -> list[dict[str, Any]]:
    return service.list_runs(db, ctx, caller, project, phase, limit)


@router.get("/{run_ref}")
def get(run_ref: str, ctx: Ctx, db: Db, caller: Caller) -> dict[str, Any]:
    return service.get(db, ctx, caller, run_ref)


@router.post("/{run_ref}/cancel")
def cancel(run_ref: str, ctx: Ctx, db: Db, caller: Caller) -> dict[str, Any]:
    result = service.cancel(db, ctx, caller, run_ref)
    _wake(ctx)
    return result


@router.post("/{run_ref}/pause")
def pause(run_ref: str, body: PauseBody, ctx: Ctx, db: Db, caller: Caller) -> dict[str, Any]:
    result = service.pause(db, ctx, caller, run_ref, body.checkpoint)
    _wake(ctx)
    return result


@router.post("/{run_ref}/resume")
def resume(run_ref: str, ctx: Ctx, db: Db, caller: Caller) -> dict[str, Any]:
    result = service.resume(db, ctx, caller, run_ref)
    _wake(ctx)
    return result


@router.post("/{run_ref}/branch")
def branch(run_ref: str, body: DeriveBody, ctx: Ctx, db: Db, caller: Caller) -> dict[str, Any]:
    result = service.derive(
        db, ctx, caller, run_ref, body.snapshot, "weights", body.steps, body.overrides, body.dryRun
    )
    _wake(ctx)
    return result


@router.post("/{run_ref}/continue")
def continue_(run_ref: str, body: DeriveBody, ctx: Ctx, db: Db, caller: Caller) -> dict[str, Any]:
    result = service.derive(
        db,
        ctx,
        caller,
        run_ref,
        body.snapshot,
        "trainingState",
        body.steps,
        body.overrides,
        body.dryRun,
    )
    _wake(ctx)
    return result


@router.get("/{run_ref}/snapshots")
def snapshots(run_ref: str, db: Db, caller: Caller) -> list[dict[str, Any]]:
    return service.snapshots(db, caller, run_ref)


@router.get("/{run_ref}/metrics")
def metrics(run_ref: str, db: Db, caller: Caller, fields: str | None = None) -> dict[str, Any]:
    wanted = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
    return service.metrics(db, caller, run_ref, wanted)


@router.get("/{run_ref}/rollouts")
def rollouts(
    run_ref: str,
    ctx: Ctx,
    db: Db,
    caller: Caller,
    step: int | None = None,
    order: str | None = None,
    limit: int | None = Query(None, ge=1),
) -> dict[str, Any]:
    return rollouts_service.rollouts(db, ctx, caller, run_ref, step, order, limit)


@router.get("/{run_ref}/tree")
def tree(run_ref: str, db: Db, caller: Caller) -> dict[str, Any]:
    return service.tree(db, caller, run_ref)


@router.get("/{run_ref}/logs")
def logs(
    run_ref: str, ctx: Ctx, caller: Caller, offset: int = 0, attempt: int | None = None
) -> dict[str, Any]:
    return service.logs(ctx, caller, run_ref, offset, attempt)


@router.get("/{run_ref}/wait")
def wait(
    run_ref: str, ctx: Ctx, caller: Caller, timeout: float | None = None, until: str = "end"
) -> StreamingResponse:
    """Line-delimited JSON: the run's events as they happen, ending with the full record once
    the run ends (or pauses, with until=rest), or at the timeout."""
    return StreamingResponse(
        service.wait_lines(ctx, caller, run_ref, timeout, until), media_type="application/x-ndjson"
    )


def _wake(ctx: Any) -> None:
    if ctx.controller is not None:
        ctx.controller.wake()
