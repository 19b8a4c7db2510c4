"""Telemetry: every metric, span and attribute name in one catalog, and the OpenTelemetry setup
that publishes them.

- `catalog`: the names, instruments, units, attributes and histogram boundaries; the only
  place a name is spelled. `prometheus_name()` says what Prometheus calls a metric.
- `figures`: how the flat figure names an engine reports map onto catalog metrics.
- `service_metrics`: `ServiceTelemetry`, the service's capacity gauges and failure counter,
  with Prometheus text for ``/metrics`` and optional OTLP export.
- `job_metrics`: `JobTelemetry`, a training job's step figures, rewards, histograms and GPU
  placement, exported over OTLP and written to ``metrics.jsonl`` and TensorBoard.
- `tracing`: `Tracing`, spans per process, and ``traceparent`` propagation from the service to
  its jobs.
- `gpu` and `placement`: GPU health sampled from NVML, and where a job's process runs.
- `grafana`: expiring dashboard links signed for Grafana's ``auth.jwt``, and the JWKS.
- `docs` and `dashboard`: generators of ``docs/observability.md`` and
  ``deploy/grafana/dashboard.json`` from the catalog.

Importing this package imports nothing heavy; each module brings in the SDK parts it needs.
"""
