"""The service's metrics: capacity gauges read from a snapshot, a failure counter, and the
front door's GenAI histograms (`serving`, see `telemetry.serving_metrics`).

`ServiceTelemetry` reads a `CapacitySnapshot` from a callable the service provides each time
metrics are collected (a Prometheus scrape of ``/metrics``, or an OTLP export to the collector),
so the gauges always show the state the service's own tables hold. Service metrics carry the
project, never the run.

They leave the service one way only (``export``): ``scrape`` serves them at ``/metrics`` and
exports nothing over OTLP; ``otlp`` exports them to the collector and ``/metrics`` answers
`ScrapeOff`. Both at once would give every series twice in Prometheus (once per path, with
different ``job``/``instance`` labels). The run-failure counter is published at 0 for every
failure reason of every project the snapshot lists, so the first failure shows in
``increase()``.

Usage in the service::

    telemetry = ServiceTelemetry(settings.collector_endpoint, capacity_snapshot, export="scrape")
    @app.get("/metrics")
    def metrics() -> Response:
        return Response(telemetry.prometheus_text(), media_type=PROMETHEUS_CONTENT_TYPE)
    ...
    telemetry.run_failed(run.project, FailureReason.JOB_CRASHED)
    ...
    telemetry.shutdown()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from akka_training.core.failures import FailureReason
from akka_training.core.phases import Phase
from akka_training.core.states import TaskState
from akka_training.telemetry import catalog as c
from akka_training.telemetry.otel import (
    METER_NAME,
    SERVICE,
    create_instruments,
    make_resource,
    meter_provider,
)
from akka_training.telemetry.serving_metrics import ServingMetrics

log = logging.getLogger(__name__)

PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST

Export = Literal["otlp", "scrape"]


class ScrapeOff(Exception):
    """``/metrics`` is off: the service exports its metrics over OTLP."""

    def __init__(self, endpoint: str | None) -> None:
        super().__init__(
            f"this deployment exports the service's metrics over OTLP to {endpoint} "
            "(trainer.telemetry.service-metrics: otlp), so /metrics serves none: scrape the "
            "collector's Prometheus exporter, or set trainer.telemetry.service-metrics to "
            "scrape to serve them here instead"
        )


@dataclass(frozen=True)
class PoolCapacity:
    name: str
    accelerator: str
    declared: int
    # Devices of the pool the cluster backend reports; None before it has answered.
    observed: int | None
    # Devices granted to claims.
    claimed: int
    # Claims by state (as `training capacity` names the states); include a 0 for a state that
    # should show as 0 rather than vanish.
    claims_by_state: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ProjectCapacity:
    name: str
    claimed: int
    # Devices the project may hold; None when the deployment sets no quota for it.
    quota: int | None


@dataclass(frozen=True)
class CapacitySnapshot:
    pools: Sequence[PoolCapacity] = ()
    projects: Sequence[ProjectCapacity] = ()
    # Runs by (project, phase). Every phase of a project listed here is published, with 0 for
    # the phases it has no run in.
    runs_by_phase: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # Evaluations by (project, state), published as runs are.
    evaluations_by_state: Mapping[tuple[str, str], int] = field(default_factory=dict)


class ServiceTelemetry:
    """The service's meter provider: a Prometheus reader for ``/metrics``, and an OTLP exporter
    when `collector_endpoint` is set. Not installed globally."""

    def __init__(
        self,
        collector_endpoint: str | None,
        snapshot: Callable[[], CapacitySnapshot],
        *,
        export: Export | None = None,
        export_interval_s: float = 15.0,
        snapshot_ttl_s: float = 1.0,
    ) -> None:
        """`export`: ``otlp`` or ``scrape``; None: otlp when `collector_endpoint` is set."""
        self.export: Export = export or ("otlp" if collector_endpoint else "scrape")
        if self.export == "otlp" and not collector_endpoint:
            raise ValueError(
                "trainer.telemetry.service-metrics is otlp but no "
                "trainer.telemetry.collector-endpoint is set"
            )
        self._endpoint = collector_endpoint
        self._seeded: set[str] = set()
        self._snapshot = snapshot
        self._ttl = snapshot_ttl_s
        self._lock = threading.Lock()
        self._cached: tuple[float, CapacitySnapshot | None] | None = None
        self._snapshot_failing = False
        self._registry = CollectorRegistry(auto_describe=False)
        self._prometheus = PrometheusMetricReader(scope_info_enabled=False, registry=self._registry)
        self._provider = meter_provider(
            make_resource(SERVICE, {}),
            collector_endpoint if self.export == "otlp" else None,
            [self._prometheus] if self.export == "scrape" else [],
            export_interval_s=export_interval_s,
        )
        meter = self._provider.get_meter(METER_NAME)
        for name, callback in self._gauges().items():
            spec = c.metric(name)
            meter.create_observable_gauge(
                spec.name, callbacks=[callback], unit=spec.unit, description=spec.description
            )
        failures = c.metric(c.PREFIX + "run.failures")
        self._failures = create_instruments(meter, [failures])[failures.name]
        # The front door's requests (OpenTelemetry's GenAI conventions).
        self.serving = ServingMetrics(meter)

    def run_failed(self, project: str, reason: FailureReason | str) -> None:
        """Count a run that failed (once per run, when it enters FAILED)."""
        self.known_projects([project])
        self._failures.add(1, {c.PROJECT: project, c.FAILURE_REASON: FailureReason(reason).value})

    def known_projects(self, projects: Iterable[str]) -> None:
        """Publish the failure counter at 0 for every reason of each new project in
        `projects`, so that Prometheus sees the project's first failure as an increase."""
        for project in projects:
            with self._lock:
                if project in self._seeded:
                    continue
                self._seeded.add(project)
            for reason in FailureReason:
                self._failures.add(0, {c.PROJECT: project, c.FAILURE_REASON: reason.value})

    def prometheus_text(self) -> bytes:
        """The Prometheus text exposition of every service metric, for ``GET /metrics``
        (served with `PROMETHEUS_CONTENT_TYPE`); `ScrapeOff` when they go over OTLP."""
        if self.export != "scrape":
            raise ScrapeOff(self._endpoint)
        self._current()  # seeds the failure counters of projects created since the last read
        return generate_latest(self._registry)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export now over OTLP (when an endpoint is set); False when it did not finish."""
        return self._provider.force_flush(timeout_millis=int(timeout_s * 1000))

    def shutdown(self) -> None:
        self._provider.shutdown()

    # --- internals ---------------------------------------------------------------------------

    def _gauges(self) -> dict[str, Callable[[CallbackOptions], Iterable[Observation]]]:
        p = c.PREFIX
        return {
            p + "pool.devices.declared": self._observe(_pool_devices("declared")),
            p + "pool.devices.observed": self._observe(_pool_devices("observed")),
            p + "pool.devices.claimed": self._observe(_pool_devices("claimed")),
            p + "pool.claims": self._observe(_pool_claims),
            p + "project.devices.claimed": self._observe(_project_claimed),
            p + "project.devices.quota": self._observe(_project_quota),
            p + "runs": self._observe(_runs),
            p + "evaluations": self._observe(_evaluations),
        }

    def _observe(
        self, read: Callable[[CapacitySnapshot], Iterable[Observation]]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            snapshot = self._current()
            return list(read(snapshot)) if snapshot is not None else []

        return callback

    def _current(self) -> CapacitySnapshot | None:
        # One collection calls every gauge's callback; read the snapshot once for all of them.
        with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached[0] < self._ttl:
                return self._cached[1]
            try:
                snapshot: CapacitySnapshot | None = self._snapshot()
            except Exception:
                if not self._snapshot_failing:
                    log.exception("capacity gauges: the capacity snapshot could not be read")
                self._snapshot_failing = True
                snapshot = None
            else:
                if self._snapshot_failing:
                    log.info("capacity gauges: the capacity snapshot reads again")
                self._snapshot_failing = False
            self._cached = (now, snapshot)
        if snapshot is not None:
            self.known_projects(p.name for p in snapshot.projects)
        return snapshot


def _pool_attrs(pool: PoolCapacity) -> dict[str, str]:
    return {c.POOL_NAME: pool.name, c.POOL_ACCELERATOR: pool.accelerator}


def _pool_devices(which: str) -> Callable[[CapacitySnapshot], Iterable[Observation]]:
    def read(snapshot: CapacitySnapshot) -> Iterable[Observation]:
        for pool in snapshot.pools:
            value = getattr(pool, which)
            if value is not None:
                yield Observation(value, _pool_attrs(pool))

    return read


def _pool_claims(snapshot: CapacitySnapshot) -> Iterable[Observation]:
    for pool in snapshot.pools:
        for state, count in pool.claims_by_state.items():
            yield Observation(count, {**_pool_attrs(pool), c.CLAIM_STATE: state})


def _project_claimed(snapshot: CapacitySnapshot) -> Iterable[Observation]:
    for project in snapshot.projects:
        yield Observation(project.claimed, {c.PROJECT: project.name})


def _project_quota(snapshot: CapacitySnapshot) -> Iterable[Observation]:
    for project in snapshot.projects:
        if project.quota is not None:
            yield Observation(project.quota, {c.PROJECT: project.name})


def _runs(snapshot: CapacitySnapshot) -> Iterable[Observation]:
    projects = sorted({project for project, _ in snapshot.runs_by_phase})
    for project in projects:
        for phase in Phase:
            count = snapshot.runs_by_phase.get((project, phase.value), 0)
            yield Observation(count, {c.PROJECT: project, c.RUN_PHASE: phase.value})


def _evaluations(snapshot: CapacitySnapshot) -> Iterable[Observation]:
    projects = sorted({project for project, _ in snapshot.evaluations_by_state})
    for project in projects:
        for state in TaskState:
            count = snapshot.evaluations_by_state.get((project, state.value), 0)
            yield Observation(count, {c.PROJECT: project, c.EVALUATION_STATE: state.value})
