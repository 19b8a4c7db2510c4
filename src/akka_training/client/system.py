"""Health, the trainer's configuration, logins and tokens."""

from __future__ import annotations

from akka_training.api.system import (
    CreatedToken,
    Exchanged,
    ExchangeRequest,
    Health,
    Info,
    Token,
    TokenRequest,
    WhoAmI,
)
from akka_training.client.base import BaseClient


class SystemApi(BaseClient):
    def health(self) -> Health:
        return self.call(Health, "GET", "/healthz")

    def info(self) -> Info:
        """The trainer's configuration and build (`akka training info`)."""
        return self.call(Info, "GET", "/v1/info")

    def exchange(self, login: str) -> Exchanged:
        """A short-lived access token for a login (an admin or project token)."""
        body = ExchangeRequest(login=login).to_json()
        return self.call(Exchanged, "POST", "/v1/auth/exchange", json=body)

    def whoami(self) -> WhoAmI:
        return self.call(WhoAmI, "GET", "/v1/auth/whoami")

    def tokens(self) -> list[Token]:
        return self.call(list[Token], "GET", "/v1/tokens")

    def create_token(
        self, name: str, projects: list[str], admin: bool = False, days: float | None = None
    ) -> CreatedToken:
        """A token for `projects` (or every project, with `admin`); its secret is in
        ``.token`` and is shown only now."""
        body = TokenRequest(name=name, projects=projects, admin=admin, expires_in_days=days)
        return self.call(CreatedToken, "POST", "/v1/tokens", json=body.to_json())

    def revoke_token(self, token_id: str) -> Token:
        return self.call(Token, "DELETE", f"/v1/tokens/{token_id}")
