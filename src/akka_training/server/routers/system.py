"""Health, info, auth and tokens."""

from __future__ import annotations

from fastapi import APIRouter, Request

from akka_training.api.system import (
    CreatedToken,
    Exchanged,
    ExchangeRequest,
    Health,
    Info,
    Token,
    TokenRequest,
    WhoAmI,
)
from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.front_door_routes import routes_of
from akka_training.server.openapi import errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services import info as info_service
from akka_training.server.services import tokens as tokens_service

router = APIRouter(route_class=SessionEndingRoute)


@router.get("/healthz", responses=errors())
def health() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    responses=errors((503, "The database does not answer: the service cannot serve requests.")),
)
def ready(db: Db) -> Health:
    """Ready to serve: the database answers (a readiness probe; `/healthz` is the liveness)."""
    return info_service.ready(db)


@router.get("/v1/info", responses=errors(401))
def info(ctx: Ctx, _caller: Caller) -> Info:
    return info_service.info(ctx)


@router.post(
    "/v1/auth/exchange",
    responses=errors(400, (401, "The login is unknown, revoked or expired at this API host.")),
)
def exchange(body: ExchangeRequest, db: Db) -> Exchanged:
    return tokens_service.exchange(db, body.login)


@router.get("/v1/auth/whoami", responses=errors(401))
def whoami(caller: Caller) -> WhoAmI:
    return tokens_service.whoami(caller)


@router.get("/v1/tokens", responses=errors(401))
def list_tokens(db: Db, caller: Caller) -> list[Token]:
    return tokens_service.list_tokens(db, caller)


@router.post("/v1/tokens", status_code=201, responses=errors(400, 401, 403, 404))
def create_token(body: TokenRequest, db: Db, caller: Caller) -> CreatedToken:
    return tokens_service.create_token(
        db, caller, body.name, body.projects, body.admin, body.expires_in_days
    )


@router.delete("/v1/tokens/{token_id}", responses=errors(401, 403, 404))
def revoke_token(token_id: str, db: Db, caller: Caller, request: Request) -> Token:
    answer = tokens_service.revoke_token(db, caller, token_id)
    routes_of(request.app).forget()  # the front door forgets what the token reached
    return answer
