"""One JSON shape for every error the service returns."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from akka_training.core.errors import AkkaError, Problem

log = logging.getLogger(__name__)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AkkaError)
    async def _akka(_request: Request, exc: AkkaError) -> JSONResponse:
        return JSONResponse(exc.to_json(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            Problem(".".join(str(p) for p in err["loc"] if p != "body"), err["msg"])
            for err in exc.errors()
        ]
        body = AkkaError("The request is not valid.", problems).to_json()
        body["error"]["code"] = "invalid"
        return JSONResponse(body, status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        message = f"The trainer failed on this request: {type(exc).__name__}: {exc}"
        return JSONResponse(AkkaError(message).to_json(), status_code=500)
