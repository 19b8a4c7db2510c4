"""Base models and their envelopes."""

from __future__ import annotations

from fastapi import APIRouter

from akka_training.api.catalog import BaseModelDetail, BaseModelSummary, CatalogEnvelope
from akka_training.server.deps import Caller, Ctx
from akka_training.server.openapi import errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import catalog as service

router = APIRouter(prefix="/v1", route_class=SessionEndingRoute)


@router.get("/base-models", responses=errors(401))
def list_models(ctx: Ctx, _caller: Caller) -> list[BaseModelSummary]:
    return service.list_models(ctx)


@router.get("/base-models/{model_id}", responses=errors(401, 404))
def get_model(model_id: str, ctx: Ctx, _caller: Caller) -> BaseModelDetail:
    return service.get_model(ctx, model_id)


@router.get("/envelopes", responses=errors(401))
def list_envelopes(ctx: Ctx, _caller: Caller) -> list[CatalogEnvelope]:
    return service.list_envelopes(ctx)
