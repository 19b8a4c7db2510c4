"""Datasets."""

from __future__ import annotations

from akka_training.client.base import BaseClient


class DatasetsApi(BaseClient):
    pass
