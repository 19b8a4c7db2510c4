"""First start of a trainer: an admin token, and a CLI context that holds it.

The embedded trainer writes its admin token to ``$AKKA_HOME/admin-token`` (mode 600) and adds a
context named ``local`` to the CLI's configuration file when the file has none, so the CLI and the
demo work with no manual step.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sqlalchemy import select

from akka_training.client.contexts import Context, load_config
from akka_training.deployment.context import AppContext
from akka_training.server.services.projects import apply_configured_quotas
from akka_training.storage.ids import hash_secret
from akka_training.storage.models import Token
from akka_training.storage.tokens import create_admin_token

log = logging.getLogger(__name__)

LOCAL_CONTEXT = "local"


def bootstrap(ctx: AppContext) -> None:
    token_file = ctx.settings.home / "admin-token"
    created = None
    with ctx.db.session() as session:
        apply_configured_quotas(session, ctx.settings.trainer.projects)
        current = token_file.read_text().strip() if token_file.exists() else None
        valid = current and session.scalar(
            select(Token).where(
                Token.hash == hash_secret(current),
                Token.kind == "admin",
                Token.revoked_at.is_(None),
            )
        )
        if not valid:
            created = create_admin_token(session, "admin (first start)")
    if created:
        _write_secret(token_file, created)
        log.info("wrote the admin token to %s", token_file)
    _ensure_context(ctx, token_file.read_text().strip(), replaced=created is not None)


def _write_secret(path: Path, secret: str) -> None:
    tmp = path.with_name(path.name + ".part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    os.replace(tmp, path)


def _ensure_context(ctx: AppContext, admin_token: str, replaced: bool) -> None:
    config = load_config()
    url = ctx.settings.trainer_url
    existing = config.contexts.get(LOCAL_CONTEXT)
    if existing is None:
        config.contexts[LOCAL_CONTEXT] = Context(LOCAL_CONTEXT, api_host=url, login=admin_token)
        config.current = config.current or LOCAL_CONTEXT
        config.save()
        log.info("added the context %r to %s", LOCAL_CONTEXT, config.path)
    elif replaced and existing.api_host.rstrip("/") == url:
        # The context points at this trainer but holds a login of an earlier home.
        existing.login = admin_token
        config.save()
