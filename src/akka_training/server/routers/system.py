"""Health, info, auth and tokens."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.services import info as info_service
from akka_training.server.services import tokens as tokens_service

router = APIRouter()


@router.get("/healthz")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/info")
def info(ctx: Ctx, _caller: Caller) -> dict[str, Any]:
    return info_service.info(ctx)


class ExchangeBody(BaseModel):
    login: str


@router.post("/v1/auth/exchange")
def exchange(body: ExchangeBody, db: Db) -> dict[str, Any]:
    return tokens_service.exchange(db, body.login)


@router.get("/v1/auth/whoami")
def whoami(caller: Caller) -> dict[str, Any]:
    return tokens_service.whoami(caller)


class TokenBody(BaseModel):
    name: str
    projects: list[str] = []
    admin: bool = False
    expiresInDays: float | None = None


@router.get("/v1/tokens")
def list_tokens(db: Db, caller: Caller) -> list[dict[str, Any]]:
    return tokens_service.list_tokens(db, caller)


@router.post("/v1/tokens", status_code=201)
def create_token(body: TokenBody, db: Db, caller: Caller) -> dict[str, Any]:
    return tokens_service.create_token(
        db, caller, body.name, body.projects, body.admin, body.expiresInDays
    )


@router.delete("/v1/tokens/{token_id}")
def revoke_token(token_id: str, db: Db, caller: Caller) -> dict[str, Any]:
    return tokens_service.revoke_token(db, caller, token_id)
