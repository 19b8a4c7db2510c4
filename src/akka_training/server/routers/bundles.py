"""Scoring bundles."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from akka_training.core.errors import PayloadTooLarge
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.services import bundles as service

router = APIRouter(prefix="/v1/bundles")


@router.post("/{project}/{name}", status_code=201)
async def register(
    project: str, name: str, request: Request, ctx: Ctx, caller: Caller
) -> dict[str, Any]:
    limit = ctx.settings.trainer.bundles.max_bytes
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(
                f"The bundle is larger than this trainer's limit of {limit} bytes (trainer.bundles.max-bytes)."
            )
        chunks.append(chunk)
    data = b"".join(chunks)

    def _store() -> dict[str, Any]:
        with ctx.db.session() as session:
            return service.register(session, ctx, caller, f"{project}/{name}", data)

    return await run_in_threadpool(_store)


@router.get("")
def list_bundles(db: Db, caller: Caller, project: str | None = None) -> list[dict[str, Any]]:
    return service.list_bundles(db, caller, project)


@router.get("/{project}/{ref}")
def get(project: str, ref: str, db: Db, caller: Caller) -> dict[str, Any]:
    return service.get(db, caller, f"{project}/{ref}")
