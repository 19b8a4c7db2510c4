"""The Tinker API under ``/tinker``: point the `tinker` SDK's ``base_url`` at ``TRAINER/tinker``.
The logic is in `server.services.tinker`; the paths and bodies are the SDK's."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from akka_training.server.auth import Principal
from akka_training.server.deps import Ctx, Db
from akka_training.server.job_routing import route_async
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import tinker as service
from akka_training.server.services import tinker_rest as rest

router = APIRouter(prefix="/tinker/api/v1", route_class=SessionEndingRoute, include_in_schema=False)

_sessions_lock = threading.Lock()
# How often a held creation question looks at its run again.
CREATION_POLL_SECONDS = 0.25


def start_sessions(app: Any) -> service.Sessions:
    """The app's hold on the Tinker sessions (which live in the database), and the thread that
    ends those whose heartbeat stops: made as the service starts (`server.app`), so that a
    restarted trainer ends the sessions whose client vanished even if no Tinker request comes,
    or else with the first Tinker request."""
    with _sessions_lock:
        held: service.Sessions | None = getattr(app.state, "tinker_sessions", None)
        if held is None:
            ctx = app.state.ctx
            held = app.state.tinker_sessions = service.Sessions(ctx.clock.now())
            app.state.tinker_expiry = service.Expiry(ctx, held)
        return held


def sessions(request: Request) -> service.Sessions:
    return start_sessions(request.app)


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
    session_id = str(body.get("session_id", ""))
    return _answer(await run_in_threadpool(service.heartbeat, ctx, held, key, session_id))


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
async def get_info(
    request: Request, db: Db, ctx: Ctx, held: HeldSessions, key: Key
) -> dict[str, Any]:
    body = await request.json()
    model_id = str(body.get("model_id", ""))
    return await run_in_threadpool(service.get_info, db, ctx, held, key, model_id)


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
    found = await run_in_threadpool(service.retrieve, ctx, key, body)
    # A training client being created is answered here: held (on the event loop) until it is
    # ready or the hold ends, as the job holds the others.
    deadline = time.monotonic() + ctx.settings.trainer.tinker.creation_hold_seconds
    while isinstance(found, service.Answer) and found.try_again and time.monotonic() < deadline:
        await asyncio.sleep(CREATION_POLL_SECONDS)
        found = await run_in_threadpool(service.retrieve, ctx, key, body)
    if isinstance(found, service.Answer):
        return _answer(found)
    question = json.dumps({"request_id": str(body.get("request_id", ""))}).encode()
    answered = await route_async(found, "retrieve_future", question, service.JSON)
    content_type = answered.headers.get("content-type", service.JSON)
    return Response(answered.content, status_code=answered.status_code, media_type=content_type)


# --- RestClient ----------------------------------------------------------------------------------


@router.get("/training_runs")
def list_training_runs(
    db: Db, key: Key, limit: int = 20, offset: int = 0, project_id: str | None = None
) -> dict[str, Any]:
    return rest.list_training_runs(db, key, limit, offset, project_id)


@router.get("/training_runs/{run_id}")
def get_training_run(run_id: str, db: Db, held: HeldSessions, key: Key) -> dict[str, Any]:
    return rest.get_training_run(db, key, held, run_id)


@router.get("/training_runs/{run_id}/checkpoints")
def list_checkpoints(run_id: str, db: Db, held: HeldSessions, key: Key) -> dict[str, Any]:
    return rest.list_checkpoints(db, key, held, run_id)


@router.get("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}/external_weights_urls")
def external_weights_urls(
    run_id: str, checkpoint_id: str, request: Request, ctx: Ctx, held: HeldSessions, key: Key
) -> dict[str, Any]:
    return rest.external_weights_urls(ctx, key, held, run_id, checkpoint_id, str(request.base_url))


@router.get("/external_weights/{run_id}/{name}/files/{path:path}")
def external_weights_file(
    run_id: str,
    name: str,
    path: str,
    ctx: Ctx,
    held: HeldSessions,
    expires: int = 0,
    signature: str = "",
) -> Response:
    """One file of a snapshot's weights, by the signed URL `external_weights_urls` answered:
    the signature is the key."""
    chunks, size = rest.open_signed(ctx, held, run_id, name, path, expires, signature)
    return StreamingResponse(
        chunks, media_type="application/octet-stream", headers={"Content-Length": str(size)}
    )


@router.get("/checkpoints")
def list_user_checkpoints(db: Db, key: Key, limit: int = 100, offset: int = 0) -> dict[str, Any]:
    return rest.list_user_checkpoints(db, key, limit, offset)


@router.post("/weights_info")
async def weights_info(request: Request, db: Db, held: HeldSessions, key: Key) -> dict[str, Any]:
    body = await request.json()
    path = str(body.get("tinker_path", ""))
    return await run_in_threadpool(rest.weights_info, db, key, held, path)


@router.get("/sessions")
def list_sessions(
    db: Db, held: HeldSessions, key: Key, limit: int = 20, offset: int = 0
) -> dict[str, Any]:
    return rest.list_sessions(db, key, held, limit, offset)


@router.get("/sessions/{session_id}")
def get_session(session_id: str, db: Db, held: HeldSessions, key: Key) -> dict[str, Any]:
    return rest.get_session(db, key, held, session_id)


# What the trainer has no counterpart for: refused with what to use instead (a 400, which the SDK
# raises at once rather than retrying).


@router.api_route(
    "/training_runs/{run_id}/checkpoints/{checkpoint_id:path}/publish", methods=["POST", "DELETE"]
)
def publish_checkpoint(_key: Key) -> None:
    raise rest.unsupported("publish_checkpoint")


@router.put("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}/ttl")
def checkpoint_ttl(_key: Key) -> None:
    raise rest.unsupported("checkpoint_ttl")


@router.delete("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}")
def delete_checkpoint(_key: Key) -> None:
    raise rest.unsupported("delete_checkpoint")


@router.post("/copy_weights")
def copy_weights(_key: Key) -> None:
    raise rest.unsupported("copy_weights")


@router.post("/save_weights_external")
def save_weights_external(_key: Key) -> None:
    raise rest.unsupported("save_weights_external")


@router.put("/sessions/{session_id}/project")
def assign_session_project(_key: Key) -> None:
    raise rest.unsupported("session_project")


@router.get("/sessions/{session_id}/trace_export")
def trace_export(_key: Key) -> None:
    raise rest.unsupported("trace_export")


@router.post("/sessions/search")
def search_sessions(_key: Key) -> None:
    raise rest.unsupported("search_sessions")
