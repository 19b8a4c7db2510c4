"""Prometheus metrics, Grafana's key set, and signed links to a run's dashboard."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from akka_training.core.errors import InvalidRequest
from akka_training.server.deps import Caller, Db, Telemetry
from akka_training.server.services.lookups import run_for
from akka_training.telemetry.service_metrics import PROMETHEUS_CONTENT_TYPE

router = APIRouter()


@router.get("/metrics")
def metrics(telemetry: Telemetry) -> Response:
    return Response(telemetry.metrics.prometheus_text(), media_type=PROMETHEUS_CONTENT_TYPE)


@router.get("/v1/grafana/jwks")
def jwks(telemetry: Telemetry) -> dict[str, Any]:
    """The keys that verify the trainer's Grafana link tokens (Grafana's `jwk_set_url`)."""
    return telemetry.grafana.jwks()


@router.get("/v1/runs/{run_ref}/grafana")
def link(
    run_ref: str, telemetry: Telemetry, db: Db, caller: Caller, project: str | None = None
) -> dict[str, Any]:
    run = run_for(db, caller, run_ref)
    if project and project != run.project:
        raise InvalidRequest(f"Run {run.id} belongs to project {run.project}, not {project}.")
    url, expires = telemetry.grafana.link(
        run.project, run.id, run.started_at or run.created_at, run.ended_at
    )
    return {"run": run.id, "project": run.project, "url": url, "expiresAt": expires.isoformat()}
