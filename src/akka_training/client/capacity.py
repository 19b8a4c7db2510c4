"""Capacity: pools, claims and projects at this moment."""

from __future__ import annotations

from typing import TYPE_CHECKING

from akka_training import api
from akka_training.client.base import BaseClient

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.capacity  # noqa: F401


class CapacityApi(BaseClient):
    def capacity(self, project: str | None = None) -> api.capacity.Capacity:
        return self.call(api.capacity.Capacity, "GET", "/v1/capacity", params={"project": project})
