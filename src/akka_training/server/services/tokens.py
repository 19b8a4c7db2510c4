"""Tokens as users see them: create, list, revoke, and exchange a login for an access token
(minting lives in `storage.tokens`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.api.system import CreatedToken, Exchanged, WhoAmI
from akka_training.api.system import Token as TokenRecord
from akka_training.core.errors import Conflict, InvalidRequest, NotFound, Unauthorized
from akka_training.server.auth import Principal
from akka_training.storage.ids import hash_secret, new_id, new_secret
from akka_training.storage.models import Project, Token

ACCESS_LIFETIME = timedelta(hours=12)


def create_token(
    session: Session,
    principal: Principal,
    name: str,
    projects: list[str],
    admin: bool = False,
    expires_in_days: float | None = None,
) -> CreatedToken:
    if admin:
        principal.require_admin()
    elif not projects:
        raise InvalidRequest("Name the projects the token may use (--project), or ask for --admin.")
    for project in projects:
        principal.require(project)
        if session.get(Project, project) is None:
            raise NotFound(f"There is no project {project!r}.")
    secret = new_secret()
    token = Token(
        id=new_id("t"),
        name=name,
        kind="admin" if admin else "project",
        hash=hash_secret(secret),
        projects=[] if admin else sorted(set(projects)),
        expires_at=(
            datetime.now(UTC) + timedelta(days=expires_in_days) if expires_in_days else None
        ),
    )
    session.add(token)
    session.flush()
    return CreatedToken(**dict(token_record(token)), token=secret)


def list_tokens(session: Session, principal: Principal) -> list[TokenRecord]:
    rows = session.scalars(
        select(Token).where(Token.kind.in_(("admin", "project"))).order_by(Token.created_at)
    )
    return [token_record(t) for t in rows if _listed_for(principal, t)]


def _listed_for(principal: Principal, token: Token) -> bool:
    """Whether `principal` sees (and may revoke) `token`: an admin sees every admin and project
    token; a project token sees the project tokens of its own projects only."""
    if token.kind not in ("admin", "project"):
        return False
    return principal.is_admin or (
        token.kind == "project" and set(token.projects) <= set(principal.projects or ())
    )


def revoke_token(session: Session, principal: Principal, token_id: str) -> TokenRecord:
    principal.refuse_reporters()
    token = session.get(Token, token_id)
    if token is None or not _listed_for(principal, token):
        # A token the caller cannot list answers as one that does not exist.
        raise NotFound(f"There is no token {token_id!r}.")
    if token.kind == "admin" and token.revoked_at is None:
        _refuse_revoking_the_last_admin(session, token)
    token.revoked_at = token.revoked_at or datetime.now(UTC)
    return token_record(token)


LAST_ADMIN = (
    "Token {id} is the last live admin token; revoking it would leave no one able to manage "
    "the trainer. Create another admin token first (`akka auth tokens create NAME --admin`), "
    "then revoke this one. Locked out already: start the trainer with "
    "`trainer.bootstrap.admin-token` set to a new secret."
)


def _refuse_revoking_the_last_admin(session: Session, token: Token) -> None:
    """Refuse to revoke the one live admin token: nobody could create another. The live admin
    tokens are read locked, so two admins revoking the last two at once cannot both succeed."""
    now = datetime.now(UTC)
    admins = session.scalars(
        select(Token).where(Token.kind == "admin", Token.revoked_at.is_(None)).with_for_update()
    ).all()
    live = {t.id for t in admins if t.expires_at is None or t.expires_at > now}
    if live <= {token.id}:
        raise Conflict(LAST_ADMIN.format(id=token.id))


def exchange(session: Session, login: str) -> Exchanged:
    """Turn a login (an admin or project token) into a short-lived access token."""
    token = session.scalar(select(Token).where(Token.hash == hash_secret(login)))
    now = datetime.now(UTC)
    if (
        token is None
        or token.kind not in ("admin", "project")
        or token.revoked_at is not None
        or (token.expires_at is not None and token.expires_at <= now)
    ):
        raise Unauthorized(
            "This login is not valid at this API host (unknown, revoked or expired); "
            "run `akka auth login` again."
        )
    secret = new_secret()
    expires = now + ACCESS_LIFETIME
    if token.expires_at is not None:
        expires = min(expires, token.expires_at)
    session.add(
        Token(
            id=new_id("a"),
            name=f"access for {token.name}",
            kind="access",
            hash=hash_secret(secret),
            projects=list(token.projects),
            parent_id=token.id,
            expires_at=expires,
        )
    )
    return Exchanged(access_token=secret, expires_at=expires, login=token_record(token))


def whoami(principal: Principal) -> WhoAmI:
    return WhoAmI(
        token_id=principal.token_id,
        name=principal.name,
        kind=principal.kind,
        projects=None if principal.projects is None else list(principal.projects),
    )


def token_record(token: Token) -> TokenRecord:
    return TokenRecord(
        id=token.id,
        name=token.name,
        kind=token.kind,
        projects=list(token.projects) if token.kind != "admin" else None,
        created_at=token.created_at,
        expires_at=token.expires_at,
        revoked_at=token.revoked_at,
        last_used_at=token.last_used_at,
    )
