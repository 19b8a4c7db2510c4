"""Projects."""

from __future__ import annotations

from fastapi import APIRouter

from akka_training.api.projects import Project, ProjectDetail, ProjectRequest, QuotaRequest
from akka_training.server.deps import Caller, Db
from akka_training.server.openapi import errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import projects as service

router = APIRouter(prefix="/v1/projects", route_class=SessionEndingRoute)


@router.get("", responses=errors(401))
def list_projects(db: Db, caller: Caller) -> list[Project]:
    return service.list_projects(db, caller)


@router.post("", status_code=201, responses=errors(400, 401, 403, 409))
def create_project(body: ProjectRequest, db: Db, caller: Caller) -> Project:
    return service.create_project(db, caller, body.name, body.quota, body.description)


@router.get("/{name}", responses=errors(401, 403, 404))
def get_project(name: str, db: Db, caller: Caller) -> ProjectDetail:
    return service.get_project(db, caller, name)


@router.put("/{name}/quota", responses=errors(400, 401, 403, 404))
def set_quota(name: str, body: QuotaRequest, db: Db, caller: Caller) -> Project:
    return service.set_quota(db, caller, name, body.quota)
