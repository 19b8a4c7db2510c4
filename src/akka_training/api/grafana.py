"""A run's link to the project's Grafana dashboard, and the keys Grafana verifies it with."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from akka_training.api.base import ResponseBody, Timestamp


class GrafanaLink(ResponseBody):
    run: str
    project: str
    url: str = Field(description="Carries a token: anyone with it can view the project's Grafana.")
    expires_at: Timestamp


class KeySet(ResponseBody):
    """A JSON Web Key Set (Grafana's ``jwk_set_url`` reads it)."""

    keys: list[dict[str, Any]]
