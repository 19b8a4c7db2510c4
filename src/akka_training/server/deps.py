"""FastAPI dependencies: the context, the service's telemetry, a short database session, the
caller.

Two kinds of caller: `Caller`, a person's or a program's token (admin, project, access), which
every route but the reports takes, and `Reporter`, which only the report routes of jobs and
tasks take. A job's token (one attempt of one run) and a task's token (one task) are refused by
`Caller` outright, whatever the route: they report, and read nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal, authenticate, bearer
from akka_training.server.observability import Observability


# Plain reads of the app's state: async, so that they take no hop through a worker thread.
async def get_context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


async def get_observability(request: Request) -> Observability:
    telemetry: Observability = request.app.state.telemetry
    return telemetry


def db_session(ctx: Annotated[AppContext, Depends(get_context)]) -> Iterator[Session]:
    """The request's session, committed when the handler returns and before the answer is sent
    (`scope="function"` below): a commit that fails answers 5xx, never the handler's 2xx."""
    with ctx.db.session() as session:
        yield session


def caller(request: Request, ctx: Annotated[AppContext, Depends(get_context)]) -> Principal:
    secret = bearer(request)
    with ctx.db.session() as session:
        principal = authenticate(session, secret)
    principal.refuse_reporters()
    return principal


def reporter(request: Request, ctx: Annotated[AppContext, Depends(get_context)]) -> Principal:
    """Any live token; the report services check that it is the job's or the task's own."""
    secret = bearer(request)
    with ctx.db.session() as session:
        return authenticate(session, secret, reporting=True)


Ctx = Annotated[AppContext, Depends(get_context)]
Telemetry = Annotated[Observability, Depends(get_observability)]
Db = Annotated[Session, Depends(db_session, scope="function")]
Caller = Annotated[Principal, Depends(caller)]
Reporter = Annotated[Principal, Depends(reporter)]
