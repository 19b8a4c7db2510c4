"""Scoring bundles."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from akka_training.api.bundles import Bundle
from akka_training.core.errors import PayloadTooLarge
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.openapi import errors, raw_body
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import bundles as service

router = APIRouter(prefix="/v1/bundles", route_class=SessionEndingRoute)


@router.post(
    "/{project}/{name}",
    status_code=201,
    responses=errors(
        (400, "Not PROJECT/NAME, or the zip cannot be packed (the message names the file)."),
        401,
        403,
        (404, "There is no such project."),
        (413, "The bundle is over trainer.bundles.max-bytes."),
    ),
    openapi_extra=raw_body("application/zip", "The bundle: a zip of Python modules."),
)
async def register(project: str, name: str, request: Request, ctx: Ctx, caller: Caller) -> Bundle:
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

    def _store() -> Bundle:
        with ctx.db.session() as session:
            return service.register(session, ctx, caller, f"{project}/{name}", data)

    return await run_in_threadpool(_store)


@router.get("", responses=errors(401, 403))
def list_bundles(db: Db, caller: Caller, project: str | None = None) -> list[Bundle]:
    return service.list_bundles(db, caller, project)


@router.get("/{project}/{ref}", responses=errors(400, 401, 403, 404))
def get(project: str, ref: str, db: Db, caller: Caller) -> Bundle:
    return service.get(db, caller, f"{project}/{ref}")
