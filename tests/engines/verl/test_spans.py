"""A verl step's span and its phases, laid out from verl's own timings."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from akka_training.engines.step_pipeline import record_step
from akka_training.engines.verl.engine import step_span
from akka_training.engines.verl.metrics import read_steps
from akka_training.telemetry import catalog as c
from akka_training.telemetry.otel import JOB_SERVICE, job_resource
from akka_training.telemetry.tracing import Tracing
from tests.engines.verl.conftest import FIXTURES

P = c.PREFIX


def test_a_verl_step_is_a_span_with_generation_and_update_under_it() -> None:
    exporter = InMemorySpanExporter()
    tracing = Tracing(JOB_SERVICE, job_resource("run-1", 1, "maths"), None, exporter=exporter)
    step = read_steps(FIXTURES / "metrics.jsonl")[0]
    figures = step.figures
    span = step_span(step.step, figures, ended=1000.0)
    assert span is not None
    with tracing.span(P + "job"):
        record_step(tracing, step.step, span)
    tracing.shutdown()

    spans = {s.name: s for s in exporter.get_finished_spans()}
    parent = spans[P + "job.step"]
    assert parent.attributes == {c.STEP: 1}
    assert parent.parent is not None and parent.parent.span_id == spans[P + "job"].context.span_id
    assert parent.end_time is not None and parent.start_time is not None
    assert (parent.end_time - parent.start_time) / 1e9 == pytest.approx(
        figures["timing/step"], abs=1e-3
    )
    generation, update = spans[P + "rl.generation"], spans[P + "rl.update"]
    for child in (generation, update):
        assert child.parent is not None and child.parent.span_id == parent.context.span_id
    assert generation.start_time == parent.start_time
    assert update.end_time == parent.end_time
    assert update.end_time is not None and update.start_time is not None
    assert (update.end_time - update.start_time) / 1e9 == pytest.approx(
        figures["timing/update"], abs=1e-3
    )
    # verl 0.9.1 scores while it generates: no reward phase of its own in its timings.
    assert P + "rl.reward" not in spans
