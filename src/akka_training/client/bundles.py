"""Scoring bundles."""

from __future__ import annotations

from typing import TYPE_CHECKING

from akka_training import api
from akka_training.client.base import BaseClient

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.bundles  # noqa: F401


class BundlesApi(BaseClient):
    def register_bundle(self, ref: str, data: bytes) -> api.bundles.Bundle:
        """Register a packed bundle (`rewards.bundles.pack_bundle`) as a version of
        ``PROJECT/NAME``; ``.existing`` is true when the same content was registered before."""
        return self.call(
            api.bundles.Bundle,
            "POST",
            f"/v1/bundles/{ref}",
            content=data,
            headers={"content-type": "application/zip"},
        )

    def bundles(self, project: str | None = None) -> list[api.bundles.Bundle]:
        return self.call(
            list[api.bundles.Bundle], "GET", "/v1/bundles", params={"project": project}
        )

    def bundle(self, ref: str) -> api.bundles.Bundle:
        return self.call(api.bundles.Bundle, "GET", f"/v1/bundles/{ref}")
