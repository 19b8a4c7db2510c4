"""The catalog: base models and their envelopes."""

from __future__ import annotations

from akka_training.api.catalog import BaseModelDetail, BaseModelSummary, CatalogEnvelope
from akka_training.client.base import BaseClient


class CatalogApi(BaseClient):
    def base_models(self) -> list[BaseModelSummary]:
        return self.call(list[BaseModelSummary], "GET", "/v1/base-models")

    def base_model(self, model_id: str) -> BaseModelDetail:
        """A model's details and the runs (envelopes) this deployment admits for it."""
        return self.call(BaseModelDetail, "GET", f"/v1/base-models/{model_id}")

    def envelopes(self) -> list[CatalogEnvelope]:
        return self.call(list[CatalogEnvelope], "GET", "/v1/envelopes")
