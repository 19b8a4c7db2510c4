"""Endpoints: a base model and a project's adapters served over the OpenAI API (the front door
is `routers/openai.py`)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from akka_training.api.endpoints import EndpointAdapterRef, EndpointCreate, EndpointRecord
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.front_door_routes import routes_of
from akka_training.server.openapi import errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import endpoints as service

router = APIRouter(prefix="/v1/endpoints", route_class=SessionEndingRoute)

_LOOKUP = (401, 403, (404, "The project has no such endpoint."))


@router.post("", status_code=201, responses=errors(400, 401, 403, 404, 409))
def create(
    body: EndpointCreate, ctx: Ctx, db: Db, caller: Caller, request: Request
) -> EndpointRecord:
    """Start an endpoint: it claims its devices, loads the model and its adapters, and serves."""
    answer = service.create(db, ctx, caller, body)
    routes_of(request.app).forget()
    if ctx.controller is not None:
        ctx.controller.wake()
    return answer


@router.get("", responses=errors(401, 403))
def list_endpoints(
    db: Db, caller: Caller, project: str | None = None, all: bool = False
) -> list[EndpointRecord]:
    """Live endpoints, newest first; `all` adds the stopped and failed ones."""
    return service.list_endpoints(db, caller, project, all)


@router.get("/{project}/{name}", responses=errors(*_LOOKUP))
def get(project: str, name: str, db: Db, caller: Caller) -> EndpointRecord:
    return service.get(db, caller, project, name)


@router.post("/{project}/{name}/adapters", responses=errors(*_LOOKUP, 400, 409))
def add_adapter(
    project: str, name: str, body: EndpointAdapterRef, db: Db, caller: Caller, request: Request
) -> EndpointRecord:
    """Serve one more adapter (RUN, RUN:SNAPSHOT or a modelName) without a restart."""
    answer = service.add_adapter(db, caller, project, name, body.adapter)
    routes_of(request.app).forget()
    return answer


@router.delete("/{project}/{name}/adapters/{adapter}", responses=errors(*_LOOKUP))
def remove_adapter(
    project: str, name: str, adapter: str, db: Db, caller: Caller, request: Request
) -> EndpointRecord:
    """Stop serving an adapter, by the name or an alias the endpoint lists."""
    answer = service.remove_adapter(db, caller, project, name, adapter)
    routes_of(request.app).forget()
    return answer


@router.delete("/{project}/{name}", responses=errors(*_LOOKUP, 409))
def delete(
    project: str, name: str, ctx: Ctx, db: Db, caller: Caller, request: Request
) -> EndpointRecord:
    """Stop the endpoint: its job ends and its devices go back to the pool."""
    answer = service.delete(db, caller, project, name)
    routes_of(request.app).forget()
    if ctx.controller is not None:
        ctx.controller.wake()
    return answer
