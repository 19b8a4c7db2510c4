"""Health, the trainer's configuration, logins and tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING

from akka_training import api
from akka_training.client.base import BaseClient

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.system  # noqa: F401


class SystemApi(BaseClient):
    def health(self) -> api.system.Health:
        return self.call(api.system.Health, "GET", "/healthz")

    def info(self) -> api.system.Info:
        """The trainer's configuration and build (`akka training info`)."""
        return self.call(api.system.Info, "GET", "/v1/info")

    def exchange(self, login: str) -> api.system.Exchanged:
        """A short-lived access token for a login (an admin or project token)."""
        body = api.system.ExchangeRequest(login=login).to_json()
        return self.call(api.system.Exchanged, "POST", "/v1/auth/exchange", json=body)

    def whoami(self) -> api.system.WhoAmI:
        return self.call(api.system.WhoAmI, "GET", "/v1/auth/whoami")

    def tokens(self) -> list[api.system.Token]:
        return self.call(list[api.system.Token], "GET", "/v1/tokens")

    def create_token(
        self, name: str, projects: list[str], admin: bool = False, days: float | None = None
    ) -> api.system.CreatedToken:
        """A token for `projects` (or every project, with `admin`); its secret is in
        ``.token`` and is shown only now."""
        body = api.system.TokenRequest(
            name=name, projects=projects, admin=admin, expires_in_days=days
        )
        return self.call(api.system.CreatedToken, "POST", "/v1/tokens", json=body.to_json())

    def revoke_token(self, token_id: str) -> api.system.Token:
        return self.call(api.system.Token, "DELETE", f"/v1/tokens/{token_id}")
