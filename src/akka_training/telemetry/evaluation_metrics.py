"""An evaluation's job publishes its metrics and spans like a training job, under its own
resource: the evaluation, its project, the run whose adapter it scores, and where it runs.

`EvaluationTelemetry` owns the job's meter provider and tracer provider, exporting over
OTLP/HTTP when a collector endpoint is set (nothing leaves the process otherwise). The job's
root span ``akka.optimize.training.evaluation`` is a child of the service's
``evaluation.submit`` (its traceparent travels in the task's spec), and each part of the job
is a child span with its duration in ``evaluation.phase.duration``::

    telemetry = EvaluationTelemetry(evaluation_resource(...), endpoint, traceparent)
    with telemetry.job({c.PROJECT: "maths", c.EVALUATION_ID: "e1"}):
        with telemetry.phase("load"):
            ...
        telemetry.generated([12, 30, 7])          # completion lengths of generated samples
        telemetry.scored(3)
        telemetry.results([("correct", 0.6, 0.4, 0.8)])
    telemetry.shutdown()                           # the last export, metrics and spans

The sample counters are published at 0 when the provider starts, so that Prometheus's
``increase()`` sees the first samples; the metric gauges are set once, when every sample is
scored.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.util.types import AttributeValue

from akka_training.telemetry import catalog as c
from akka_training.telemetry.otel import (
    JOB_SERVICE,
    METER_NAME,
    ResourceValue,
    check_resource,
    create_instruments,
    make_resource,
    meter_provider,
    placed,
)
from akka_training.telemetry.tracing import Tracing

_P = c.PREFIX


def evaluation_resource(
    evaluation_id: str,
    project: str,
    *,
    run_id: str | None = None,
    pod: str | None = None,
    node: str | None = None,
    namespace: str | None = None,
) -> dict[str, ResourceValue]:
    """The resource attributes of an evaluation's job (absent values are left out)."""
    values = {c.EVALUATION_ID: evaluation_id, c.PROJECT: project, c.RUN_ID: run_id}
    return placed(values, pod, node, namespace)


class EvaluationTelemetry:
    def __init__(
        self,
        resource_attrs: Mapping[str, ResourceValue],
        collector_endpoint: str | None,
        traceparent: str | None = None,
        *,
        readers: Sequence[MetricReader] = (),
        span_exporter: SpanExporter | None = None,
        export_interval_s: float = 15.0,
    ) -> None:
        check_resource(
            resource_attrs,
            "evaluation",
            c.EVALUATION_REQUIRED_RESOURCE_ATTRIBUTES,
            c.EVALUATION_RESOURCE_ATTRIBUTES,
        )
        self._traceparent = traceparent
        self._provider = meter_provider(
            make_resource(JOB_SERVICE, resource_attrs),
            collector_endpoint,
            readers,
            export_interval_s=export_interval_s,
        )
        meter = self._provider.get_meter(METER_NAME)
        self._instruments = create_instruments(meter, c.metrics_of(c.Publisher.EVALUATION))
        self.tracing = Tracing(
            JOB_SERVICE, resource_attrs, collector_endpoint, exporter=span_exporter
        )
        self._counter("evaluation.samples").add(0)
        self._counter("evaluation.samples.scored").add(0)

    @contextmanager
    def job(self, attributes: Mapping[str, AttributeValue]) -> Iterator[None]:
        """The job's root span, a child of the submission's when its traceparent is known."""
        with self.tracing.span(_P + "evaluation", attributes, parent=self._traceparent):
            yield

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A part of the job (`catalog.EVALUATION_PHASES`): a span, and its duration."""
        if name not in c.EVALUATION_PHASES:
            raise KeyError(name)
        began = time.monotonic()
        try:
            with self.tracing.span(_P + "evaluation." + name):
                yield
        finally:
            self._instruments[_P + "evaluation.phase.duration"].record(
                time.monotonic() - began, {c.EVALUATION_PHASE: name}
            )

    def generated(self, completion_lengths: Iterable[int]) -> None:
        lengths = list(completion_lengths)
        histogram = self._instruments[_P + "evaluation.completion.length"]
        for length in lengths:
            histogram.record(length)
        self._counter("evaluation.samples").add(len(lengths))

    def scored(self, samples: int) -> None:
        self._counter("evaluation.samples.scored").add(samples)

    def results(self, metrics: Iterable[tuple[str, float, float, float]]) -> None:
        """Each metric's (name, mean, low, high)."""
        for name, mean, low, high in metrics:
            attrs = {c.EVALUATION_METRIC: name}
            self._instruments[_P + "evaluation.metric.mean"].set(mean, attrs)
            self._instruments[_P + "evaluation.metric.low"].set(low, attrs)
            self._instruments[_P + "evaluation.metric.high"].set(high, attrs)

    def shutdown(self) -> None:
        """The last export of both providers (a job's end must not lose its figures)."""
        self._provider.shutdown()
        self.tracing.shutdown()

    def _counter(self, short: str) -> Any:
        return self._instruments[_P + short]
