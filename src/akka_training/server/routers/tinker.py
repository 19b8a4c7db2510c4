"""The Tinker API under ``/tinker``: point the `tinker` SDK's ``base_url`` at ``TRAINER/tinker``.
The logic is in `server.services.tinker`; the paths and bodies are the SDK's."""

from __future__ import annotations

import threading
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from akka_training.server.auth import Principal
from akka_training.server.deps import Ctx, Db
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import tinker as service

router = APIRouter(prefix="/tinker/api/v1", route_class=SessionEndingRoute, include_in_schema=False)

_sessions_lock = threading.Lock()


def sessions(request: Request) -> service.Sessions:
    """The app's sessions, made with the first Tinker request (and the thread that ends those
    whose heartbeat stops)."""
    with _sessions_lock:
        held: service.Sessions | None = getattr(request.app.state, "tinker_sessions", None)
        if held is None:
            held = request.app.state.tinker_sessions = service.Sessions()
            request.app.state.tinker_expiry = service.Expiry(request.app.state.ctx, held)
        return held


def key_holder(request: Request, ctx: Ctx) -> Principal:
    with ctx.db.session() as session:
        return service.principal_of(session, request.headers.get("x-api-key", "").strip())


def stop_expiry(app: Any) -> None:
    """Stop the thread that ends expired sessions, if the app made one."""
    expiry: service.Expiry | None = getattr(app.state, "tinker_expiry", None)
    if expiry is not None:
        expiry.stop()


Key = Annotated[Principal, Depends(key_holder)]
HeldSessions = Annotated[service.Sessions, Depends(sessions)]


def _answer(answer: service.Answer) -> Response:
    return Response(answer.body, status_code=answer.status, media_type=answer.content_type)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.post("/client/config")
def client_config(_key: Key) -> dict[str, Any]:
    return service.client_config()


@router.post("/client/dynamic_config")
def dynamic_config(_key: Key) -> dict[str, Any]:
    return {}


@router.get("/get_server_capabilities")
def capabilities(ctx: Ctx, _key: Key) -> dict[str, Any]:
    return service.capabilities(ctx)


@router.post("/telemetry")
def telemetry(_key: Key) -> dict[str, str]:
    # The SDK's own usage events: accepted, and not kept.
    return {"status": "accepted"}


@router.post("/create_session")
async def create_session(
    request: Request, db: Db, ctx: Ctx, held: HeldSessions, key: Key
) -> dict[str, Any]:
    body = await request.json()
    return await run_in_threadpool(service.create_session, db, ctx, held, key, body)


@router.post("/session_heartbeat")
async def session_heartbeat(request: Request, ctx: Ctx, held: HeldSessions, key: Key) -> Response:
    body = await request.json()
    return _answer(service.heartbeat(ctx, held, key, str(body.get("session_id", ""))))


@router.post("/sessions/{session_id}/finish")
def finish_session(session_id: str, ctx: Ctx, held: HeldSessions, key: Key) -> dict[str, Any]:
    service.finish(ctx, held, key, session_id)
    return {}


@router.post("/create_model")
async def create_model(
    request: Request, db: Db, ctx: Ctx, held: HeldSessions, key: Key
) -> dict[str, Any]:
    body = await request.json()
    return await run_in_threadpool(service.create_model, db, ctx, held, key, body)


@router.post("/get_info")
async def get_info(request: Request, db: Db, held: HeldSessions, key: Key) -> dict[str, Any]:
    body = await request.json()
    model_id = str(body.get("model_id", ""))
    return await run_in_threadpool(service.get_info, db, held, key, model_id)


async def _submit(kind: str, request: Request, ctx: Ctx, key: Principal) -> Response:
    body = await request.body()
    content_type = request.headers.get("content-type", "")
    held = sessions(request)
    answer = await run_in_threadpool(service.submit, ctx, held, key, kind, body, content_type)
    return _answer(answer)


@router.post("/forward_backward")
async def forward_backward(request: Request, ctx: Ctx, key: Key) -> Response:
    return await _submit("forward_backward", request, ctx, key)


@router.post("/optim_step")
async def optim_step(request: Request, ctx: Ctx, key: Key) -> Response:
    return await _submit("optim_step", request, ctx, key)


@router.post("/save_weights")
async def save_weights(request: Request, ctx: Ctx, key: Key) -> Response:
    return await _submit("save_weights", request, ctx, key)


@router.post("/load_weights")
async def load_weights(request: Request, ctx: Ctx, key: Key) -> Response:
    return await _submit("load_weights", request, ctx, key)


@router.post("/save_weights_for_sampler")
async def save_weights_for_sampler(request: Request, ctx: Ctx, key: Key) -> Response:
    return await _submit("save_weights_for_sampler", request, ctx, key)


@router.post("/create_sampling_session")
async def create_sampling_session(
    request: Request, db: Db, ctx: Ctx, held: HeldSessions, key: Key
) -> dict[str, Any]:
    body = await request.json()
    return await run_in_threadpool(service.create_sampling_session, db, ctx, held, key, body)


@router.get("/samplers/{sampler_id}")
def get_sampler(sampler_id: str, db: Db, key: Key) -> dict[str, Any]:
    return service.get_sampler(db, key, sampler_id)


@router.post("/asample")
async def asample(request: Request, ctx: Ctx, key: Key) -> Response:
    body = await request.body()
    return _answer(await run_in_threadpool(service.sample, ctx, key, body))


@router.post("/retrieve_future")
async def retrieve_future(request: Request, ctx: Ctx, key: Key) -> Response:
    body = await request.json()
    return _answer(await run_in_threadpool(service.retrieve, ctx, key, body))
