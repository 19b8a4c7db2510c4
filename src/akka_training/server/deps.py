"""FastAPI dependencies: the context, the service's telemetry, a short database session, the
caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal, authenticate, bearer
from akka_training.server.observability import Observability


def get_context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


def get_observability(request: Request) -> Observability:
    telemetry: Observability = request.app.state.telemetry
    return telemetry


def db_session(ctx: Annotated[AppContext, Depends(get_context)]) -> Iterator[Session]:
    with ctx.db.session() as session:
        yield session


def caller(request: Request, ctx: Annotated[AppContext, Depends(get_context)]) -> Principal:
    secret = bearer(request)
    with ctx.db.session() as session:
        return authenticate(session, secret)


Ctx = Annotated[AppContext, Depends(get_context)]
Telemetry = Annotated[Observability, Depends(get_observability)]
Db = Annotated[Session, Depends(db_session)]
Caller = Annotated[Principal, Depends(caller)]
