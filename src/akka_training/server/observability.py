"""The service's telemetry: capacity gauges and failure counts (Prometheus at /metrics, OTLP when
a collector is set), run spans, and signed Grafana links."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry.trace import Span
from sqlalchemy import func, select

from akka_training.core.evaluations import EVALUATE
from akka_training.core.states import ClaimState
from akka_training.deployment.context import AppContext
from akka_training.server.metrics_access import read_metrics_token
from akka_training.server.services.capacity import pool_usage
from akka_training.storage.models import Claim, Project, Run, Task
from akka_training.telemetry import catalog as c
from akka_training.telemetry.grafana import GrafanaLinks
from akka_training.telemetry.otel import SERVICE
from akka_training.telemetry.service_metrics import (
    CapacitySnapshot,
    PoolCapacity,
    ProjectCapacity,
    ServiceTelemetry,
)
from akka_training.telemetry.tracing import Tracing


class Observability:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        telemetry = ctx.settings.trainer.telemetry
        # Read once at start-up, so that a missing Secret stops the service with its setting.
        self.metrics_token = read_metrics_token(telemetry.metrics_token_file)
        endpoint = telemetry.collector_endpoint
        self.metrics = ServiceTelemetry(endpoint, self.snapshot, export=telemetry.service_export)
        # The same service.name as the service's metrics.
        self.tracing = Tracing(SERVICE, {}, endpoint)
        grafana = ctx.settings.trainer.grafana
        self.grafana = GrafanaLinks(
            grafana.url or "http://localhost:3000",
            grafana.dashboard,
            Path(grafana.signing_key).read_text() if grafana.signing_key else None,
            ctx.settings.home,
            grafana.link_lifetime_seconds,
            issuer=grafana.issuer,
            audience=grafana.audience,
        )
        # This application's failed runs only (its database's listeners, not the process's).
        ctx.db.listeners.on_run_failed(self.metrics.run_failed)

    def shutdown(self) -> None:
        self.ctx.db.listeners.remove(self.metrics.run_failed)
        self.metrics.shutdown()
        self.tracing.shutdown()

    def snapshot(self) -> CapacitySnapshot:
        with self.ctx.db.session() as session:
            pools = [
                PoolCapacity(
                    name=p.name,
                    accelerator=p.accelerator,
                    declared=p.declared,
                    observed=p.observed,
                    claimed=p.granted,
                    claims_by_state=p.claims_by_state,
                )
                for p in pool_usage(session, self.ctx)
            ]
            held = dict(
                session.execute(
                    select(Claim.project, func.sum(Claim.devices))
                    .where(Claim.state == ClaimState.GRANTED)
                    .group_by(Claim.project)
                ).all()
            )
            projects = [
                ProjectCapacity(name=p.name, claimed=int(held.get(p.name) or 0), quota=p.quota)
                for p in session.scalars(select(Project))
            ]
            runs = {
                (project, phase): int(n)
                for project, phase, n in session.execute(
                    select(Run.project, Run.phase, func.count()).group_by(Run.project, Run.phase)
                )
            }
            evaluations = {
                (project, state): int(n)
                for project, state, n in session.execute(
                    select(Task.project, Task.state, func.count())
                    .where(Task.kind == EVALUATE)
                    .group_by(Task.project, Task.state)
                )
            }
        return CapacitySnapshot(
            pools=pools, projects=projects, runs_by_phase=runs, evaluations_by_state=evaluations
        )

    @contextmanager
    def span(self, name: str, run: Run, **attrs: Any) -> Iterator[str | None]:
        """A span of `run`'s trace; yields its traceparent (to hand to a job)."""
        attributes = {c.RUN_ID: run.id, c.PROJECT: run.project, **attrs}
        with self.tracing.span(c.PREFIX + name, attributes, parent=run.traceparent):
            yield self.tracing.traceparent()

    def traceparent(self) -> str | None:
        """The W3C traceparent of the current span (None outside one), to hand to a job."""
        return self.tracing.traceparent()

    @contextmanager
    def operation(self, name: str, **attrs: Any) -> Iterator[Span]:
        """A span of the service's own work that belongs to no run (a dataset registration);
        yields the span, to add attributes known only at the end."""
        with self.tracing.span(c.PREFIX + name, attrs) as current:
            yield current
