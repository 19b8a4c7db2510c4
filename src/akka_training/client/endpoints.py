"""Endpoints: a base model and a project's adapters served over the OpenAI API (at the
trainer's ``/openai/v1``, with a project token as the API key)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from akka_training import api
from akka_training.client.base import BaseClient

if TYPE_CHECKING:
    import akka_training.api.endpoints  # noqa: F401


class EndpointsApi(BaseClient):
    def create_endpoint(
        self,
        project: str,
        name: str,
        base_model: str,
        adapters: list[str] | None = None,
        gpus: int = 1,
        pool: str | None = None,
    ) -> api.endpoints.EndpointRecord:
        """Start an endpoint serving `base_model` and `adapters` (RUN, RUN:SNAPSHOT or a
        modelName); it is READY once its job has loaded them."""
        body = api.endpoints.EndpointCreate(
            project=project,
            name=name,
            base_model=base_model,
            adapters=adapters or [],
            gpus=gpus,
            pool=pool,
        ).to_json()
        return self.call(api.endpoints.EndpointRecord, "POST", "/v1/endpoints", json=body)

    def endpoints(
        self, project: str | None = None, all: bool = False
    ) -> list[api.endpoints.EndpointRecord]:
        params = {"project": project, "all": all}
        return self.call(list[api.endpoints.EndpointRecord], "GET", "/v1/endpoints", params=params)

    def endpoint(self, project: str, name: str) -> api.endpoints.EndpointRecord:
        return self.call(api.endpoints.EndpointRecord, "GET", f"/v1/endpoints/{project}/{name}")

    def add_endpoint_adapter(
        self, project: str, name: str, adapter: str
    ) -> api.endpoints.EndpointRecord:
        """Serve one more adapter on the endpoint, without a restart."""
        body = api.endpoints.EndpointAdapterRef(adapter=adapter).to_json()
        return self.call(
            api.endpoints.EndpointRecord,
            "POST",
            f"/v1/endpoints/{project}/{name}/adapters",
            json=body,
        )

    def remove_endpoint_adapter(
        self, project: str, name: str, adapter: str
    ) -> api.endpoints.EndpointRecord:
        return self.call(
            api.endpoints.EndpointRecord,
            "DELETE",
            f"/v1/endpoints/{project}/{name}/adapters/{adapter}",
        )

    def delete_endpoint(self, project: str, name: str) -> api.endpoints.EndpointRecord:
        return self.call(api.endpoints.EndpointRecord, "DELETE", f"/v1/endpoints/{project}/{name}")
