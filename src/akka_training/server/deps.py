"""FastAPI dependencies: the context, a short database session, the caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from akka_training.server.auth import Principal, authenticate, bearer
from akka_training.server.context import AppContext, get_context


def db_session(ctx: Annotated[AppContext, Depends(get_context)]) -> Iterator[Session]:
    with ctx.db.session() as session:
        yield session


def caller(request: Request, ctx: Annotated[AppContext, Depends(get_context)]) -> Principal:
    secret = bearer(request)
    with ctx.db.session() as session:
        return authenticate(session, secret)


Ctx = Annotated[AppContext, Depends(get_context)]
Db = Annotated[Session, Depends(db_session)]
Caller = Annotated[Principal, Depends(caller)]
