"""The catalog: base models and their envelopes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from akka_training import api
from akka_training.client.base import BaseClient

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.catalog  # noqa: F401


class CatalogApi(BaseClient):
    def base_models(self) -> list[api.catalog.BaseModelSummary]:
        return self.call(list[api.catalog.BaseModelSummary], "GET", "/v1/base-models")

    def base_model(self, model_id: str) -> api.catalog.BaseModelDetail:
        """A model's details and the runs (envelopes) this deployment admits for it."""
        return self.call(api.catalog.BaseModelDetail, "GET", f"/v1/base-models/{model_id}")

    def envelopes(self) -> list[api.catalog.CatalogEnvelope]:
        return self.call(list[api.catalog.CatalogEnvelope], "GET", "/v1/envelopes")
