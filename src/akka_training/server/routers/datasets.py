"""Datasets.

``POST /v1/datasets/{project}/{name}?alias=A`` takes the file as the raw request body (not
multipart, which would buffer it) and answers 201 with a new version or 200 with the version
that already holds the same content. A reference's tag travels in the last path segment:
``/v1/datasets/maths/train:v2``, ``/v1/datasets/maths/train@sha256:ab12cd``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from akka_training.core.errors import AkkaError
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.deps import caller as identify
from akka_training.server.services import datasets as service

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1")


@router.post("/datasets/{project}/{name}", status_code=201)
async def register(
    project: str, name: str, request: Request, ctx: Ctx, alias: str | None = None
) -> Response:
    try:
        principal = await run_in_threadpool(identify, request, ctx)
        body = await service.register_dataset(
            ctx, principal, project, name, alias, request.stream(), _declared_length(request)
        )
    except ClientDisconnect:
        log.info("an upload to %s/%s stopped before its end; nothing was kept", project, name)
        return Response(status_code=400)  # nobody is left to read it
    except AkkaError as exc:
        # The client may still be sending. Closing the connection after the answer stops it,
        # instead of letting it send the rest of a body nobody will read; our client reads the
        # answer even when its send then fails.
        return JSONResponse(exc.to_json(), status_code=exc.status, headers={"Connection": "close"})
    return JSONResponse(body, status_code=201 if body["created"] else 200)


@router.get("/datasets")
def list_datasets(db: Db, caller: Caller, project: str | None = None) -> list[dict[str, Any]]:
    return service.list_datasets(db, caller, project)


@router.get("/datasets/{project}/{ref}")
def get_dataset(project: str, ref: str, db: Db, caller: Caller) -> dict[str, Any]:
    return service.get_dataset(db, caller, f"{project}/{ref}")


@router.get("/datasets/{project}/{ref}/versions")
def list_versions(project: str, ref: str, db: Db, caller: Caller) -> list[dict[str, Any]]:
    return service.list_versions(db, caller, f"{project}/{ref}")


@router.put("/datasets/{project}/{ref}/aliases/{alias}")
def set_alias(project: str, ref: str, alias: str, db: Db, caller: Caller) -> dict[str, Any]:
    return service.set_alias(db, caller, f"{project}/{ref}", alias)


def _declared_length(request: Request) -> int | None:
    value = request.headers.get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
