"""Prometheus metrics, Grafana's key set, and signed links to a run's dashboard."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from akka_training.api.grafana import GrafanaLink, KeySet
from akka_training.core.errors import InvalidRequest, NotFound
from akka_training.server.deps import Caller, Db, Telemetry
from akka_training.server.metrics_access import check_scraper
from akka_training.server.openapi import errors
from akka_training.server.routes import SessionEndingRoute
from akka_training.server.services.lookups import run_for
from akka_training.telemetry.service_metrics import PROMETHEUS_CONTENT_TYPE, ScrapeOff

router = APIRouter(route_class=SessionEndingRoute)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "The service's metrics in the Prometheus text format.",
            "content": {PROMETHEUS_CONTENT_TYPE: {"schema": {"type": "string"}}},
        },
        **errors(
            (401, "No token, or one this trainer does not know."),
            (403, "The token is neither the metrics token nor an admin token."),
            (404, "The deployment exports the service's metrics over OTLP instead."),
        ),
    },
)
def metrics(request: Request, telemetry: Telemetry, db: Db) -> Response:
    """The service's metrics, where the deployment has Prometheus scrape them (404 where it
    exports them over OTLP instead: one path per deployment, so no series comes twice), for
    the metrics token (`trainer.telemetry.metrics-token-file`) and admin tokens: they cover
    every project."""
    check_scraper(request, db, telemetry.metrics_token)
    try:
        text = telemetry.metrics.prometheus_text()
    except ScrapeOff as exc:
        raise NotFound(str(exc)) from None
    return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)


@router.get("/v1/grafana/jwks", responses=errors())
def jwks(telemetry: Telemetry) -> KeySet:
    """The keys that verify the trainer's Grafana link tokens (Grafana's `jwk_set_url`)."""
    return KeySet.model_validate(telemetry.grafana.jwks())


@router.get(
    "/v1/runs/{run_ref}/grafana",
    responses=errors(
        (400, "A bad run reference, or the run belongs to another project than the one named."),
        401,
        403,
        (404, "There is no such run."),
    ),
)
def link(
    run_ref: str, telemetry: Telemetry, db: Db, caller: Caller, project: str | None = None
) -> GrafanaLink:
    run = run_for(db, caller, run_ref)
    if project and project != run.project:
        raise InvalidRequest(f"Run {run.id} belongs to project {run.project}, not {project}.")
    url, expires = telemetry.grafana.link(
        run.project, run.id, run.started_at or run.created_at, run.ended_at
    )
    return GrafanaLink(run=run.id, project=run.project, url=url, expires_at=expires)
