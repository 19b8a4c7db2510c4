from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from akka_training.telemetry import catalog as c
from akka_training.telemetry.otel import SERVICE
from akka_training.telemetry.tracing import TRACEPARENT_ENV, Tracing, job_traceparent
from akka_training.testing.otlp_receiver import OtlpReceiver

P = c.PREFIX
SRC = Path(__file__).resolve().parents[2] / "src"

# What a job process does with the traceparent it is started with.
JOB = textwrap.dedent(
    """
    import sys
    from akka_training.telemetry import catalog as c
    from akka_training.telemetry.otel import JOB_SERVICE, job_resource
    from akka_training.telemetry.tracing import Tracing, job_traceparent

    tracing = Tracing(JOB_SERVICE, job_resource("run-7", 3, "maths"), sys.argv[1])
    with tracing.span(c.PREFIX + "job", {c.RUN_ID: "run-7"}, parent=job_traceparent(None)):
        with tracing.span(c.PREFIX + "job.step", {c.STEP: 1}):
            pass
    tracing.shutdown()
    """
)


def test_a_job_process_joins_the_trace_of_the_launch_span(receiver: OtlpReceiver) -> None:
    service = Tracing(SERVICE, {}, receiver.endpoint)
    try:
        with service.span(P + "job.launch", {c.RUN_ID: "run-7", c.RUN_ATTEMPT: 3}) as launch:
            traceparent = service.traceparent()
            assert traceparent is not None
            env = {**os.environ, TRACEPARENT_ENV: traceparent, "PYTHONPATH": str(SRC)}
            subprocess.run(
                [sys.executable, "-c", JOB, receiver.endpoint], env=env, check=True, timeout=60
            )
            launch_id = format(launch.get_span_context().span_id, "016x")
            trace_id = format(launch.get_span_context().trace_id, "032x")
    finally:
        service.shutdown()

    launched = receiver.wait_for_span(P + "job.launch")
    job = receiver.wait_for_span(P + "job")
    step = receiver.wait_for_span(P + "job.step")
    assert launched.span_id == launch_id
    assert launched.resource["service.name"] == "akka-training"
    assert job.trace_id == step.trace_id == launched.trace_id == trace_id
    assert job.parent_span_id == launched.span_id
    assert step.parent_span_id == job.span_id
    assert job.resource[c.RUN_ID] == "run-7"
    assert job.resource["service.name"] == "akka-training-job"
    assert step.attributes == {c.STEP: 1}


def test_the_spec_traceparent_wins_over_the_environment() -> None:
    env = {TRACEPARENT_ENV: "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    from_spec = "00-" + "3" * 32 + "-" + "4" * 16 + "-01"
    assert job_traceparent(from_spec, env) == from_spec
    assert job_traceparent(None, env) == env[TRACEPARENT_ENV]
    assert job_traceparent(None, {}) is None


def test_spans_outside_the_catalog_are_refused_and_errors_are_recorded(
    receiver: OtlpReceiver,
) -> None:
    tracing = Tracing(SERVICE, {}, receiver.endpoint)
    try:
        assert tracing.traceparent() is None
        with pytest.raises(KeyError), tracing.span(P + "not.a.span"):
            pass
        with pytest.raises(RuntimeError), tracing.span(P + "run.submit"):
            raise RuntimeError("refused")
    finally:
        tracing.shutdown()
    submitted = receiver.wait_for_span(P + "run.submit")
    assert submitted.status_code == 2  # STATUS_CODE_ERROR
    assert submitted.parent_span_id is None


def test_span_ids_do_not_repeat_across_jobs_that_seed_random_alike() -> None:
    # Every job seeds Python's `random` with its plan's seed (42 by default); ids drawn from
    # it repeated across jobs, and Tempo put one job's spans under another's.
    ids = []
    for _ in range(2):
        random.seed(42)
        tracing = Tracing(SERVICE, {}, None)
        try:
            with tracing.span(P + "job") as span:
                context = span.get_span_context()
                ids.append((context.trace_id, context.span_id))
        finally:
            tracing.shutdown()
    assert ids[0][0] != ids[1][0] and ids[0][1] != ids[1][1]
