"""Start-up of a trainer: its first admin token, and a CLI context that holds it.

- With ``trainer.bootstrap.admin-token`` (or ``admin-token-file``, a mounted Secret) the given
  token is the admin token: registered when the database does not hold it yet, never written
  to the home. A revoked one stops start-up (a rotation puts a new one in the Secret).
- Without it, the embedded trainer mints one on its first start, writes it to
  ``$AKKA_HOME/admin-token`` (mode 600) and adds a context named ``local`` to the CLI's
  configuration file when the file has none, so the CLI and the demo work with no manual step.
  A later start whose database already holds a live admin token mints none, whatever its home
  holds: a pod restarted with a fresh home and the same database creates no second token.
- The CLI context is written only when ``trainer.bootstrap.write-cli-context`` is on (the
  default; off in a pod, whose home is no one's).
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.client.contexts import Context, load_config
from akka_training.config.settings import Settings, SettingsError
from akka_training.deployment.context import AppContext
from akka_training.server.services.projects import apply_configured_quotas
from akka_training.storage.db import Database
from akka_training.storage.ids import hash_secret, new_id
from akka_training.storage.models import Token
from akka_training.storage.tokens import create_admin_token

log = logging.getLogger(__name__)

LOCAL_CONTEXT = "local"
GIVEN_NAME = "admin (trainer.bootstrap.admin-token)"


def bootstrap(ctx: AppContext) -> None:
    bootstrap_home(ctx.settings, ctx.db)


def bootstrap_home(settings: Settings, db: Database) -> None:
    """The admin token and the CLI context, from the settings and the database alone:
    `akka trainer serve` calls it before it builds the development models, so that a command
    run meanwhile finds the context (and waits for the trainer, which answers ``starting``).
    Calling it again changes nothing."""
    given = given_admin_token(settings)
    token_file = settings.home / "admin-token"
    created = None
    with db.session() as session:
        apply_configured_quotas(session, settings.trainer.projects)
        if given is not None:
            _register_given(session, given)
            admin = given
        else:
            current = token_file.read_text().strip() if token_file.exists() else None
            if current and _live_admin(session, current):
                admin = current
            elif _any_live_admin(session):
                log.info(
                    "the database already holds an admin token; none created (this home has "
                    "no copy of it in %s)",
                    token_file,
                )
                return
            else:
                admin = created = create_admin_token(session, "admin (first start)")
    if created:
        _write_secret(token_file, created)
        log.info("wrote the admin token to %s", token_file)
    if settings.trainer.bootstrap.write_cli_context:
        _ensure_context(settings, admin, replaced=created is not None or given is not None)


def given_admin_token(deployment: Settings) -> str | None:
    """The admin token the settings give, read from its file when they name one."""
    settings = deployment.trainer.bootstrap
    if settings.admin_token and settings.admin_token_file:
        raise SettingsError(
            "Bad setting: trainer.bootstrap.admin-token and trainer.bootstrap.admin-token-file "
            "are both set; keep one."
        )
    if settings.admin_token_file:
        path = Path(settings.admin_token_file)
        try:
            value = path.read_text().strip()
        except OSError as exc:
            raise SettingsError(
                f"Bad setting: trainer.bootstrap.admin-token-file {path} cannot be read "
                f"({exc.strerror}); mount the admin token's Secret there or unset the setting."
            ) from None
        if not value:
            raise SettingsError(
                f"Bad setting: trainer.bootstrap.admin-token-file {path} is empty; put the "
                "admin token in it."
            )
        return value
    value = (settings.admin_token or "").strip()
    return value or None


def _register_given(session: Session, secret: str) -> None:
    if len(secret) < 32:
        raise SettingsError(
            "Bad setting: trainer.bootstrap.admin-token is shorter than 32 characters; use a "
            "long random secret (openssl rand -hex 32)."
        )
    row = session.scalar(select(Token).where(Token.hash == hash_secret(secret)))
    if row is None:
        session.add(Token(id=new_id("t"), name=GIVEN_NAME, kind="admin", hash=hash_secret(secret)))
        log.info("registered the admin token given by trainer.bootstrap")
    elif row.kind != "admin" or row.revoked_at is not None:
        raise SettingsError(
            f"Bad setting: the token given by trainer.bootstrap is {row.id}, which is "
            f"{'revoked' if row.revoked_at is not None else 'not an admin token'}; put a new "
            "secret in trainer.bootstrap.admin-token (or its file)."
        )


def _live_admin(session: Session, secret: str) -> bool:
    return (
        session.scalar(
            select(Token.id).where(
                Token.hash == hash_secret(secret),
                Token.kind == "admin",
                Token.revoked_at.is_(None),
            )
        )
        is not None
    )


def _any_live_admin(session: Session) -> bool:
    rows = session.scalars(
        select(Token).where(Token.kind == "admin", Token.revoked_at.is_(None))
    ).all()
    now = datetime.now(UTC)
    return any(t.expires_at is None or t.expires_at > now for t in rows)


def _write_secret(path: Path, secret: str) -> None:
    tmp = path.with_name(path.name + ".part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    os.replace(tmp, path)


def _ensure_context(settings: Settings, admin_token: str, replaced: bool) -> None:
    config = load_config()
    url = settings.trainer_url
    existing = config.contexts.get(LOCAL_CONTEXT)
    if existing is None:
        config.contexts[LOCAL_CONTEXT] = Context(LOCAL_CONTEXT, api_host=url, login=admin_token)
        config.current = config.current or LOCAL_CONTEXT
        config.save()
        log.info("added the context %r to %s", LOCAL_CONTEXT, config.path)
    elif replaced and existing.api_host.rstrip("/") == url and existing.login != admin_token:
        # The context points at this trainer but holds a login of an earlier home.
        existing.login = admin_token
        config.save()
