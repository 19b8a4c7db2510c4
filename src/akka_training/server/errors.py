"""One JSON shape for every error the service returns (`api.errors.ErrorBody`).

A request the database was too busy for (`storage.errors`) answers 503 with ``Retry-After``;
any other failure to read or write it answers 500: a write that did not commit is never
answered with a 2xx (the session commits before the answer is sent, `server.deps`)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from akka_training.core.errors import (
    AkkaError,
    InvalidRequest,
    Problem,
    ServiceUnavailable,
    StorageFull,
    listed,
    storage_full,
)
from akka_training.core.parsing import field_message
from akka_training.storage.errors import RETRY_AFTER_SECONDS, busy_message, unstorable_message

log = logging.getLogger(__name__)

# Where FastAPI found a parameter; the field a user knows is what follows.
_PLACES = ("body", "query", "path", "header")
# What FastAPI answers when reading a JSON body raised something other than a decoding error.
_UNPARSED_BODY = "There was an error parsing the body"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AkkaError)
    async def _akka(_request: Request, exc: AkkaError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(SQLAlchemyError)
    async def _database(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        message = busy_message(exc)
        if message is not None:
            log.warning("database busy on %s %s: %s", request.method, request.url.path, exc)
            return error_response(ServiceUnavailable(message, retry_after=RETRY_AFTER_SECONDS))
        message = unstorable_message(exc)
        if message is not None:
            return error_response(InvalidRequest(message))
        log.exception("database error on %s %s", request.method, request.url.path)
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        return JSONResponse(
            AkkaError(
                f"The trainer could not read or save this request in its database, and "
                f"nothing of it was saved: {type(exc).__name__}: {detail}"
            ).to_json(),
            status_code=500,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and exc.detail == _UNPARSED_BODY:
            # FastAPI words every failure to read a body so. Malformed JSON is a validation
            # error instead; this is a refusal while the body arrived (`body_limits`), or JSON
            # Python's reader gave up on (nested past its recursion limit).
            if isinstance(exc.__cause__, AkkaError):
                return error_response(exc.__cause__)
            refused = InvalidRequest(_unreadable(exc.__cause__))
            return JSONResponse(refused.to_json(), status_code=400)
        return await http_exception_handler(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(invalid_request(exc.errors()).to_json(), status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        full = storage_full(exc)
        if full is not None:
            log.error("storage full on %s %s: %s", request.method, request.url.path, full)
            return JSONResponse(full_storage(full).to_json(), status_code=StorageFull.status)
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        message = f"The trainer failed on this request: {type(exc).__name__}: {exc}"
        return JSONResponse(AkkaError(message).to_json(), status_code=500)


def _unreadable(cause: BaseException | None) -> str:
    if isinstance(cause, RecursionError):
        return (
            "The request body is JSON nested too deeply to read; a request is a few levels "
            "deep: check what sent it."
        )
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return (
            "The request body holds a number of more than 4300 digits, larger than any field "
            "holds; check what sent it."
        )
    return f"The request body could not be read as JSON ({type(cause).__name__}: {cause})."


def error_response(exc: AkkaError) -> JSONResponse:
    headers = None
    if isinstance(exc, ServiceUnavailable) and exc.retry_after is not None:
        headers = {"Retry-After": str(exc.retry_after)}
    return JSONResponse(exc.to_json(), status_code=exc.status, headers=headers)


def full_storage(error: OSError) -> StorageFull:
    """The answer to a request whose write found the storage full, naming what to free."""
    where = f" ({error.filename})" if error.filename else ""
    return StorageFull(
        f"The trainer's storage is full: no space left on the device{where}; nothing of this "
        "request was kept. Free space in the blob store (trainer.storage.url) or the trainer's "
        "home (trainer.home), or lower execution.keepAdapters of the runs that keep many "
        "snapshots, then try again."
    )


def invalid_request(errors: Any) -> InvalidRequest:
    """The refusal of a request whose parameters or body did not validate: every problem at
    once, an unknown field by its name."""
    problems = listed([_problem(err) for err in errors])
    lines = "".join(f"\n  - {p.message}" for p in problems)
    return InvalidRequest(f"The request is not valid:{lines}", problems)


def _problem(err: dict[str, Any]) -> Problem:
    loc = list(err["loc"])
    if loc and loc[0] in _PLACES:
        loc = loc[1:]
    field = ".".join(str(part) for part in loc) or "body"
    if err["type"] == "extra_forbidden":
        return Problem(field, f"{field} is not a known field; remove it or check its spelling.")
    if err["type"] == "missing":
        return Problem(field, f"{field} is required; set it.")
    return Problem(field, field_message(field, err))
