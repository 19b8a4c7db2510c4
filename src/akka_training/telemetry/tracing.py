"""Spans, one tracer provider per process, and trace context from the service to its jobs.

The service opens ``akka.optimize.training.job.launch`` when it starts an attempt's job and
passes `Tracing.traceparent()` to the job, in the job spec (``telemetry.traceparent``) and in
the ``TRACEPARENT`` environment variable. The job opens its root span
``akka.optimize.training.job`` with that traceparent as parent, so every span of the job joins
the run's trace.

Service::

    with tracing.span(c.PREFIX + "job.launch", {c.RUN_ID: run.id, ...}):
        spec.telemetry.traceparent = tracing.traceparent()
        backend.launch(spec, env={TRACEPARENT_ENV: spec.telemetry.traceparent, ...})

Job::

    tracing = Tracing(JOB_SERVICE, job_resource_from_spec(spec), spec.telemetry.collector_endpoint)
    with tracing.span(c.PREFIX + "job", parent=job_traceparent(spec.telemetry.traceparent)):
        with tracing.span(c.PREFIX + "job.step", {c.STEP: 1}):
            ...
    tracing.shutdown()

Without a collector endpoint spans are still created (so ``traceparent()`` works) and dropped.

Span and trace ids come from the operating system's randomness (`SystemIds`), not from
Python's `random`: a job seeds `random` with the plan's seed, and the SDK's default generator
draws from it, so every job of the same seed gave the same ids (spans were mis-parented in
Tempo and Jaeger).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from akka_training.telemetry import catalog as c
from akka_training.telemetry.otel import ResourceValue, make_resource, otlp_url

TRACEPARENT_ENV = "TRACEPARENT"
TRACER_NAME = "akka_training"

_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(frozen=True)
class RecordedSpan:
    """A span that already happened, from `start_s` to `end_s` (``time.time()`` seconds)."""

    name: str
    start_s: float
    end_s: float
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


def job_traceparent(from_spec: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The traceparent a job's spans join: the spec's, else ``TRACEPARENT`` from the
    environment, else None (the job starts its own trace)."""
    env = os.environ if env is None else env
    return from_spec or env.get(TRACEPARENT_ENV) or None


class SystemIds(IdGenerator):
    """Span and trace ids no seeding of `random` repeats (`random.SystemRandom`: os.urandom)."""

    def __init__(self) -> None:
        self._random = random.SystemRandom()

    def generate_span_id(self) -> int:
        while True:
            span_id = self._random.getrandbits(64)
            if span_id != trace.INVALID_SPAN_ID:
                return span_id

    def generate_trace_id(self) -> int:
        while True:
            trace_id = self._random.getrandbits(128)
            if trace_id != trace.INVALID_TRACE_ID:
                return trace_id

    def is_trace_id_random(self) -> bool:
        return True


class Tracing:
    """A tracer provider for this process (never installed globally), exporting over OTLP/HTTP
    when `collector_endpoint` is set. Span names must be in the catalog."""

    def __init__(
        self,
        service_name: str,
        resource_attrs: Mapping[str, ResourceValue],
        collector_endpoint: str | None,
        *,
        exporter: SpanExporter | None = None,
        schedule_delay_s: float = 2.0,
    ) -> None:
        self._provider = TracerProvider(
            resource=make_resource(service_name, resource_attrs), id_generator=SystemIds()
        )
        if exporter is None and collector_endpoint:
            exporter = OTLPSpanExporter(endpoint=otlp_url(collector_endpoint, "traces"))
        if exporter is not None:
            processor: SpanProcessor = BatchSpanProcessor(
                exporter, schedule_delay_millis=schedule_delay_s * 1000
            )
            self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer(TRACER_NAME)

    @contextmanager
    def span(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue] | None = None,
        *,
        parent: str | None = None,
    ) -> Iterator[Span]:
        """Open a span named from the catalog, as a child of the current span, or of the span
        `parent` (a W3C traceparent) names. An exception leaving the block is recorded on the
        span and re-raised."""
        c.span(name)  # a name outside the catalog is a bug: KeyError
        ctx = _PROPAGATOR.extract({"traceparent": parent}) if parent else None
        with self._tracer.start_as_current_span(
            name, context=ctx, attributes=dict(attributes or {})
        ) as current:
            yield current

    def record(
        self,
        name: str,
        start_s: float,
        end_s: float,
        attributes: Mapping[str, AttributeValue] | None = None,
        *,
        children: Sequence[RecordedSpan] = (),
    ) -> None:
        """A span that already happened (from `start_s` to `end_s`, `time.time()` seconds), as
        a child of the current span, with `children` under it: a training step is known only
        once it ended, and its phases with it."""
        c.span(name)
        for child in children:
            c.span(child.name)
        span = self._tracer.start_span(
            name, attributes=dict(attributes or {}), start_time=int(start_s * 1e9)
        )
        inside = trace.set_span_in_context(span)
        for child in children:
            part = self._tracer.start_span(
                child.name,
                context=inside,
                attributes=dict(child.attributes),
                start_time=int(child.start_s * 1e9),
            )
            part.end(end_time=int(child.end_s * 1e9))
        span.end(end_time=int(end_s * 1e9))

    def traceparent(self) -> str | None:
        """The W3C traceparent of the current span, to hand to a job; None outside a span."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=otel_context.get_current())
        return carrier.get("traceparent")

    def flush(self, timeout_s: float = 10.0) -> bool:
        return self._provider.force_flush(timeout_millis=int(timeout_s * 1000))

    def shutdown(self) -> None:
        self._provider.shutdown()
