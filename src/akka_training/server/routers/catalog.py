"""Base models, envelopes and capacity."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.services import capacity as capacity_service
from akka_training.server.services import catalog as service

router = APIRouter(prefix="/v1")


@router.get("/base-models")
def list_models(ctx: Ctx, _caller: Caller) -> list[dict[str, Any]]:
    return service.list_models(ctx)


@router.get("/base-models/{model_id}")
def get_model(model_id: str, ctx: Ctx, _caller: Caller) -> dict[str, Any]:
    return service.get_model(ctx, model_id)


@router.get("/envelopes")
def list_envelopes(ctx: Ctx, _caller: Caller) -> list[dict[str, Any]]:
    return service.list_envelopes(ctx)


@router.get("/capacity")
def capacity(ctx: Ctx, db: Db, caller: Caller, project: str | None = None) -> dict[str, Any]:
    if project:
        caller.require(project)
    return capacity_service.capacity(db, ctx, project)
