"""Scoring bundles."""

from __future__ import annotations

from akka_training.api.bundles import Bundle
from akka_training.client.base import BaseClient


class BundlesApi(BaseClient):
    def register_bundle(self, ref: str, data: bytes) -> Bundle:
        """Register a packed bundle (`rewards.bundles.pack_bundle`) as a version of
        ``PROJECT/NAME``; ``.existing`` is true when the same content was registered before."""
        return self.call(
            Bundle,
            "POST",
            f"/v1/bundles/{ref}",
            content=data,
            headers={"content-type": "application/zip"},
        )

    def bundles(self, project: str | None = None) -> list[Bundle]:
        return self.call(list[Bundle], "GET", "/v1/bundles", params={"project": project})

    def bundle(self, ref: str) -> Bundle:
        return self.call(Bundle, "GET", f"/v1/bundles/{ref}")
