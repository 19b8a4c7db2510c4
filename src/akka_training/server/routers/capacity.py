"""Capacity: pools, claims and projects at this moment."""

from __future__ import annotations

from fastapi import APIRouter

from akka_training.api.capacity import Capacity
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.openapi import errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import capacity as service

router = APIRouter(prefix="/v1", route_class=SessionEndingRoute)


@router.get("/capacity", responses=errors(401, 403, 404))
def capacity(ctx: Ctx, db: Db, caller: Caller, project: str | None = None) -> Capacity:
    if project:
        caller.require(project)
    return service.capacity(db, ctx, project, caller.projects)
