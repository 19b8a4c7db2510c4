"""Who may scrape `/metrics`: the service's metrics cover every project (runs by phase, claims
and quotas by project), so only the deployment's metrics token (`trainer.telemetry.
metrics-token-file`, the secret Prometheus is given) and admin tokens may read them."""

from __future__ import annotations

import hmac
from pathlib import Path

from fastapi import Request
from sqlalchemy.orm import Session

from akka_training.config.settings import SettingsError
from akka_training.core.errors import Forbidden, Unauthorized
from akka_training.server.auth import authenticate

NO_TOKEN = (
    "GET /metrics needs a token: give Prometheus the metrics token "
    "(trainer.telemetry.metrics-token-file) or an admin token as its bearer token "
    "(authorization.credentials_file in its scrape config)."
)
NOT_ADMIN = (
    "The service's metrics cover every project: scrape them with the metrics token "
    "(trainer.telemetry.metrics-token-file) or an admin token."
)


def read_metrics_token(path_setting: str | None) -> str | None:
    """The metrics token in the file the settings name; None where they name none."""
    if not path_setting:
        return None
    path = Path(path_setting)
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise SettingsError(
            f"Bad setting: trainer.telemetry.metrics-token-file {path} cannot be read "
            f"({exc.strerror}); mount the metrics token's Secret there or unset the setting."
        ) from None
    if len(value) < 32:
        raise SettingsError(
            f"Bad setting: trainer.telemetry.metrics-token-file {path} holds "
            f"{'nothing' if not value else 'a token shorter than 32 characters'}; put a long "
            "random secret in it (openssl rand -hex 32)."
        )
    return value


def check_scraper(request: Request, session: Session, metrics_token: str | None) -> None:
    """Let the request through with the metrics token or an admin token; refuse it otherwise."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    secret = value.strip()
    if scheme.lower() != "bearer" or not secret:
        raise Unauthorized(NO_TOKEN)
    if metrics_token is not None and hmac.compare_digest(secret, metrics_token):
        return
    if not authenticate(session, secret).is_admin:
        raise Forbidden(NOT_ADMIN)
