"""Ray's own clients of the dashboard's HTTP APIs, as the Ray backend uses them: jobs through the
job submission SDK, nodes through the state API. Neither joins the cluster (no ``ray.init``):
the service stays outside it. Both send Ray's token header when ``RAY_AUTH_MODE=token`` is set
in the service's environment (with ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``).

This module imports Ray; the backend imports it only when ``trainer.backend`` is ``ray``.
"""

from __future__ import annotations

from typing import Any

from ray.job_submission import JobSubmissionClient
from ray.util.state.api import StateApiClient
from ray.util.state.common import ListApiOptions, NodeState, StateResource

__all__ = ["JobsClient", "list_nodes"]


class JobsClient(JobSubmissionClient):
    """Ray's job submission client with a deadline on every request. The SDK sends its requests
    without a timeout, so a head that accepts connections and never answers would hold the
    controller's loop forever."""

    def __init__(self, address: str, timeout: float) -> None:
        # Set before the base constructor: it already calls the head (a version check).
        self._timeout = timeout
        super().__init__(address)

    def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", self._timeout)
        return super()._do_request(method, endpoint, **kwargs)


def list_nodes(address: str, timeout: float) -> list[dict[str, Any]]:
    """Every node the cluster knows (alive or not) with its state, labels and total
    resources."""
    client = StateApiClient(address=address)
    rows = client.list(
        StateResource.NODES,
        # The state API spends 80% of this on the server side and the rest on the wire.
        options=ListApiOptions(limit=10_000, timeout=max(1, round(timeout)), detail=True),
        raise_on_missing_output=False,
    )
    return [
        {
            "node_id": row.node_id,
            "state": row.state,
            "labels": dict(row.labels or {}),
            "resources_total": dict(row.resources_total or {}),
        }
        for row in rows
        if isinstance(row, NodeState)
    ]
