"""Who is calling: tokens are looked up by hash; a principal says which projects it may touch."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from fastapi import Request
from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.core.errors import Conflict, Forbidden, Unauthorized
from akka_training.storage.ids import hash_secret
from akka_training.storage.models import Token

# Writing last_used_at on every request would make each read a write; once a minute is enough.
_TOUCH_EVERY = timedelta(seconds=60)


@dataclass(frozen=True)
class Principal:
    token_id: str
    name: str
    kind: str  # admin | project | access | job | task | bootstrap
    projects: tuple[str, ...] | None  # None: every project
    run_id: str | None = None
    attempt: int | None = None
    task_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.projects is None and self.kind not in ("job", "task", "bootstrap")

    def can(self, project: str) -> bool:
        return self.projects is None or project in self.projects

    def refuse_reporters(self) -> None:
        """A job's or a task's token reports for its attempt or task, and does nothing else."""
        if self.kind == "job":
            raise Forbidden("A job token can only report for its own run.")
        if self.kind == "task":
            raise Forbidden("A task token can only report for its own task.")
        if self.kind == "bootstrap":
            raise Forbidden(
                "A bootstrap credential is only exchanged for its job's token "
                "(POST /v1/jobs/bootstrap)."
            )

    def require(self, project: str) -> None:
        self.refuse_reporters()
        if not self.can(project):
            raise Forbidden(
                f"This token has no access to project {project!r}; use a token of that "
                "project or an admin token."
            )

    def require_admin(self) -> None:
        if not self.is_admin:
            raise Forbidden("This needs an admin token.")


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthorized(
            "This request needs a token: log in with `akka auth login`, or set AKKA_ACCESS_TOKEN."
        )
    return value.strip()


def authenticate(session: Session, secret: str, reporting: bool = False) -> Principal:
    """The principal of a live token. `reporting`: the request is a job's report, where the
    token of an attempt that has ended (revoked then) is told to stop, as a late report of an
    attempt that is no longer current always was, rather than that it is unknown."""
    token = session.scalar(select(Token).where(Token.hash == hash_secret(secret)))
    now = datetime.now(UTC)
    if reporting and token is not None and token.kind == "job" and token.revoked_at is not None:
        raise Conflict(f"Attempt {token.attempt} of run {token.run_id} is no longer current; stop.")
    if reporting and token is not None and token.kind == "task" and token.revoked_at is not None:
        raise Conflict(f"Task {token.task_id} has ended; stop.")
    if token is None or token.revoked_at is not None:
        raise Unauthorized("The token is not known to this trainer or was revoked; log in again.")
    if token.expires_at is not None and token.expires_at <= now:
        raise Unauthorized("The token has expired; log in again (`akka auth login`).")
    if token.last_used_at is None or now - token.last_used_at > _TOUCH_EVERY:
        token.last_used_at = now
    projects = None if token.kind == "admin" else tuple(token.projects or ())
    if token.kind == "access" and token.parent_id:
        parent = session.get(Token, token.parent_id)
        if parent is None or parent.revoked_at is not None:
            raise Unauthorized("The login behind this token was revoked; log in again.")
        projects = None if parent.kind == "admin" else tuple(parent.projects or ())
    return Principal(
        token.id, token.name, token.kind, projects, token.run_id, token.attempt, token.task_id
    )
