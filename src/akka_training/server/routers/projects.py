"""Projects."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from akka_training.server.deps import Caller, Db
from akka_training.server.services import projects as service

router = APIRouter(prefix="/v1/projects")


class ProjectBody(BaseModel):
    name: str
    quota: int | None = None
    description: str | None = None


class QuotaBody(BaseModel):
    quota: int | None


@router.get("")
def list_projects(db: Db, caller: Caller) -> list[dict[str, Any]]:
    return service.list_projects(db, caller)


@router.post("", status_code=201)
def create_project(body: ProjectBody, db: Db, caller: Caller) -> dict[str, Any]:
    return service.create_project(db, caller, body.name, body.quota, body.description)


@router.get("/{name}")
def get_project(name: str, db: Db, caller: Caller) -> dict[str, Any]:
    return service.get_project(db, caller, name)


@router.put("/{name}/quota")
def set_quota(name: str, body: QuotaBody, db: Db, caller: Caller) -> dict[str, Any]:
    return service.set_quota(db, caller, name, body.quota)
