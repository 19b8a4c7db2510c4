"""One JSON shape for every error the service returns (`api.errors.ErrorBody`)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from akka_training.core.errors import AkkaError, InvalidRequest, Problem

log = logging.getLogger(__name__)

# Where FastAPI found a parameter; the field a user knows is what follows.
_PLACES = ("body", "query", "path", "header")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AkkaError)
    async def _akka(_request: Request, exc: AkkaError) -> JSONResponse:
        return JSONResponse(exc.to_json(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(invalid_request(exc.errors()).to_json(), status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        message = f"The trainer failed on this request: {type(exc).__name__}: {exc}"
        return JSONResponse(AkkaError(message).to_json(), status_code=500)


def invalid_request(errors: Any) -> InvalidRequest:
    """The refusal of a request whose parameters or body did not validate: every problem at
    once, an unknown field by its name."""
    problems = [_problem(err) for err in errors]
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
    return Problem(field, f"{field}: {err['msg']}.")
