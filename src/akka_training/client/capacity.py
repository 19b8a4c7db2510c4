"""Capacity: pools, claims and projects at this moment."""

from __future__ import annotations

from akka_training.api.capacity import Capacity
from akka_training.client.base import BaseClient


class CapacityApi(BaseClient):
    def capacity(self, project: str | None = None) -> Capacity:
        return self.call(Capacity, "GET", "/v1/capacity", params={"project": project})
