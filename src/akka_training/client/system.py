"""Health, info, auth, tokens, projects, catalog and capacity."""

from __future__ import annotations

from typing import Any

from akka_training.client.base import BaseClient


class SystemApi(BaseClient):
    def health(self) -> dict[str, Any]:
        return self.get("/healthz")

    def info(self) -> dict[str, Any]:
        return self.get("/v1/info")

    def exchange(self, login: str) -> dict[str, Any]:
        return self.post("/v1/auth/exchange", {"login": login})

    def whoami(self) -> dict[str, Any]:
        return self.get("/v1/auth/whoami")

    def capacity(self, project: str | None = None) -> dict[str, Any]:
        return self.get("/v1/capacity", project=project)

    def base_models(self) -> list[dict[str, Any]]:
        return self.get("/v1/base-models")

    def base_model(self, model_id: str) -> dict[str, Any]:
        return self.get(f"/v1/base-models/{model_id}")

    def envelopes(self) -> list[dict[str, Any]]:
        return self.get("/v1/envelopes")

    def projects(self) -> list[dict[str, Any]]:
        return self.get("/v1/projects")

    def project(self, name: str) -> dict[str, Any]:
        return self.get(f"/v1/projects/{name}")

    def create_project(
        self, name: str, quota: int | None, description: str | None = None
    ) -> dict[str, Any]:
        return self.post("/v1/projects", {"name": name, "quota": quota, "description": description})

    def tokens(self) -> list[dict[str, Any]]:
        return self.get("/v1/tokens")

    def create_token(
        self, name: str, projects: list[str], admin: bool = False, days: float | None = None
    ) -> dict[str, Any]:
        return self.post(
            "/v1/tokens",
            {"name": name, "projects": projects, "admin": admin, "expiresInDays": days},
        )

    def revoke_token(self, token_id: str) -> dict[str, Any]:
        return self.delete(f"/v1/tokens/{token_id}")
