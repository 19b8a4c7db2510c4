"""Scoring bundles."""

from __future__ import annotations

from typing import Any

from akka_training.client.base import BaseClient


class BundlesApi(BaseClient):
    def register_bundle(self, ref: str, data: bytes) -> dict[str, Any]:
        return self.request(
            "POST", f"/v1/bundles/{ref}", content=data, headers={"content-type": "application/zip"}
        )

    def bundles(self, project: str | None = None) -> list[dict[str, Any]]:
        return self.get("/v1/bundles", project=project)

    def bundle(self, ref: str) -> dict[str, Any]:
        return self.get(f"/v1/bundles/{ref}")
