"""Datasets.

``POST /v1/datasets/{project}/{name}?alias=A`` takes the file as the raw request body (not
multipart, which would buffer it) and answers 201 with a new version or 200 with the version
that already holds the same content. A reference's tag travels in the last path segment:
``/v1/datasets/maths/train:v2``, ``/v1/datasets/maths/train@sha256:ab12cd``.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from akka_training.api.datasets import (
    AliasSet,
    DatasetDetail,
    DatasetSummary,
    DatasetVersion,
    Registered,
)
from akka_training.core.errors import AkkaError
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.deps import caller as identify
from akka_training.server.openapi import NDJSON, errors, raw_body
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import datasets as service

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1", route_class=SessionEndingRoute)

_REGISTER_ERRORS = errors(
    (400, "Not a dataset name or alias, or the upload stopped before its end (no body)."),
    401,
    403,
    (404, "There is no such project."),
    (409, "Others register the same name at this moment; try again."),
    (
        413,
        "The file is over trainer.datasets.max-bytes; refused before it is read when the "
        "request declares its length.",
    ),
    (422, "The file's rows were refused, with every problem (code invalid)."),
    (507, "The trainer's storage is full (code storage-full); nothing of the upload was kept."),
)


@router.post(
    "/datasets/{project}/{name}",
    status_code=201,
    response_model=Registered,
    responses={
        200: {"model": Registered, "description": "The same content was registered before."},
        **_REGISTER_ERRORS,
    },
    openapi_extra=raw_body(
        NDJSON, "The dataset's JSON Lines, one chat, prompt-completion or preference row a line."
    ),
)
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
    return JSONResponse(body.to_json(), status_code=201 if body.created else 200)


@router.get("/datasets", responses=errors(401, 403, 404))
def list_datasets(db: Db, caller: Caller, project: str | None = None) -> list[DatasetSummary]:
    return service.list_datasets(db, caller, project)


@router.get("/datasets/{project}/{ref}", responses=errors(400, 401, 403, 404))
def get_dataset(project: str, ref: str, db: Db, caller: Caller) -> DatasetDetail:
    return service.get_dataset(db, caller, f"{project}/{ref}")


@router.get("/datasets/{project}/{ref}/versions", responses=errors(400, 401, 403, 404))
def list_versions(project: str, ref: str, db: Db, caller: Caller) -> list[DatasetVersion]:
    return service.list_versions(db, caller, f"{project}/{ref}")


@router.put("/datasets/{project}/{ref}/aliases/{alias}", responses=errors(400, 401, 403, 404))
def set_alias(project: str, ref: str, alias: str, db: Db, caller: Caller) -> AliasSet:
    return service.set_alias(db, caller, f"{project}/{ref}", alias)


def _declared_length(request: Request) -> int | None:
    value = request.headers.get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
