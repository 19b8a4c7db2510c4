"""The front door: the OpenAI API under ``/openai/v1`` (`chat/completions`, `completions`,
`models`), with a project's token as the API key.

A request's `model` is resolved to one of the caller's projects' endpoints and an adapter on it
(`services/endpoints.route`), and forwarded to the endpoint's job, its answer (a stream too)
passed back as it comes. Every refusal is OpenAI's error object: 400, 401, 404 for a model no
endpoint of the caller's projects serves (another project's among them), and 503 with
``Retry-After`` while the endpoint starts.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from akka_training.core.errors import AkkaError
from akka_training.core.serving import ADAPTER_HEADER, KEY_HEADER
from akka_training.deployment.context import AppContext
from akka_training.server import front_door_metrics as metering
from akka_training.server.auth import Principal, authenticate, bearer
from akka_training.server.front_door_routes import Resolved, routes_of
from akka_training.server.job_routing import tls_context
from akka_training.server.services import endpoints as service

router = APIRouter(prefix="/openai/v1", include_in_schema=False)

# Seconds a client is told to wait while an endpoint starts.
RETRY_AFTER = 5
_TIMEOUT = httpx.Timeout(600.0, connect=10.0)


@router.get("/models")
async def models(request: Request) -> Response:
    ctx: AppContext = request.app.state.ctx
    try:
        principal = await anyio.to_thread.run_sync(_principal, ctx, request)
        served = await anyio.to_thread.run_sync(_served, ctx, principal)
    except AkkaError as exc:
        return _error(exc)
    data = [
        {"id": name, "object": "model", "created": int(time.time()), "owned_by": project}
        for name, project in served
    ]
    return JSONResponse({"object": "list", "data": data})


@router.post("/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await _forward(request, "/v1/chat/completions")


@router.post("/completions")
async def completions(request: Request) -> Response:
    return await _forward(request, "/v1/completions")


async def _forward(request: Request, path: str) -> Response:
    ctx: AppContext = request.app.state.ctx
    started = metering.arrived(request)
    routes = routes_of(request.app)
    raw = await request.body()
    problem: JSONResponse | None = None
    model: object = None
    try:
        body = json.loads(raw)
    except ValueError:
        problem = _refuse(400, "The request's body is not JSON.", None)
    else:
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(model, str) or not model:
            problem = _refuse(
                400, "model is required: a base model, a run, or RUN:step-N.", "model"
            )
    try:
        secret = bearer(request)
        if problem is not None or not isinstance(model, str):
            await anyio.to_thread.run_sync(_principal, ctx, request)  # a 401 comes first
            assert problem is not None
            return problem
        resolved = await routes.resolve(
            secret, model, functools.partial(anyio.to_thread.run_sync, _resolve, ctx, secret, model)
        )
    except AkkaError as exc:
        return _error(exc)
    route = resolved.route
    exchange = metering.exchange(request, path, model, route, started)
    if route.address is None:
        if ctx.controller is not None:
            ctx.controller.wake()  # an idle endpoint may have been started again
        metering.refused(exchange, 503)
        return _refuse(
            503,
            f"The endpoint serving {model} is starting; try again in a few seconds.",
            None,
            {"Retry-After": str(RETRY_AFTER)},
        )
    headers = {"Content-Type": "application/json", KEY_HEADER: route.key}
    if route.adapter is not None:
        headers[ADAPTER_HEADER] = route.adapter
    client = httpx.AsyncClient(
        base_url=route.address, timeout=_TIMEOUT, verify=tls_context(), trust_env=False
    )
    try:
        upstream = await client.send(
            client.build_request("POST", path, content=raw, headers=headers), stream=True
        )
    except httpx.HTTPError:
        await client.aclose()
        routes.forget(route.address)
        metering.refused(exchange, 503)
        return _refuse(
            503,
            f"The endpoint serving {model} does not answer; it may be restarting. Try again "
            "in a few seconds.",
            None,
            {"Retry-After": str(RETRY_AFTER)},
        )

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for piece in upstream.aiter_raw():
                yield piece
        finally:
            await upstream.aclose()
            await client.aclose()

    return StreamingResponse(
        metering.relayed(relay(), exchange, upstream),
        status_code=upstream.status_code,
        media_type=upstream.headers.get("content-type", "application/json"),
    )


def _principal(ctx: AppContext, request: Request) -> Principal:
    with ctx.db.session() as session:
        principal = authenticate(session, bearer(request))
    principal.refuse_reporters()
    return principal


def _resolve(ctx: AppContext, secret: str, model: str) -> Resolved:
    """Who `secret` is and where `model` is served for it, in one transaction."""
    with ctx.db.session() as session:
        principal = authenticate(session, secret)
        principal.refuse_reporters()
        return Resolved(principal, service.route(session, ctx, principal, model))


def _served(ctx: AppContext, principal: Principal) -> list[tuple[str, str]]:
    with ctx.db.session() as session:
        return service.served_models(session, principal)


def _error(exc: AkkaError) -> JSONResponse:
    param = "model" if exc.status == 404 else None
    # OpenAI's code for a quota; a full pool has its own.
    code = "insufficient_quota" if getattr(exc, "reason", None) == "quota" else None
    return _refuse(exc.status, exc.message, param, code=code)


def _refuse(
    status: int,
    message: str,
    param: str | None,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> JSONResponse:
    kinds = {
        401: "authentication_error",
        403: "permission_error",
        404: "invalid_request_error",
        429: "insufficient_quota",
    }
    codes = {401: "invalid_api_key", 404: "model_not_found", 429: "pool_full", 503: "unavailable"}
    kind = kinds.get(status, "invalid_request_error" if status < 500 else "server_error")
    error: dict[str, Any] = {
        "message": message,
        "type": kind,
        "param": param,
        "code": code or codes.get(status),
    }
    return JSONResponse({"error": error}, status_code=status, headers=headers)
