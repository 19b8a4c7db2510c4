"""An evaluation's job publishes its metrics and spans like a training job: a real evaluation
on the development model, through the task job entry point, exporting over OTLP/HTTP to a
loopback receiver. Its spans join the submission's trace (the traceparent its spec carries),
one span per part of the job; its metric gauges hold the figures of its result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from akka_training.blobstore import LocalBlobStore
from akka_training.core.evaluations import EvaluateParams
from akka_training.core.tasks import TaskSpec, TaskTelemetry
from akka_training.telemetry import catalog as c
from akka_training.testing.otlp_receiver import OtlpReceiver
from tests.engines.conftest import ReportServer
from tests.engines.tasks.test_job import pin, run

# A real evaluation job: the development model loaded and generating, in this process.
pytestmark = pytest.mark.slow

P = c.PREFIX
ROWS = [
    {
        "messages": [
            {"role": "user", "content": f"What is {a} + 0?"},
            {"role": "assistant", "content": f"#### {a}"},
        ]
    }
    for a in range(3)
]
# The submission's span, as the service would hand it over (trace id, span id).
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SUBMIT_SPAN = "00f067aa0ba902b7"


def test_an_evaluation_publishes_its_metrics_and_spans_in_its_submissions_trace(
    store: LocalBlobStore,
    report_server: ReportServer,
    catalog: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    store.put_bytes(
        "datasets/sha256/e1.jsonl", "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    )
    params = EvaluateParams.model_validate(
        {
            "datasetRef": "maths/sums:v1",
            "baseModel": pin(catalog["tiny-chat"]),
            "adapter": None,
            "tokenizer": None,
            "dataset": "datasets/sha256/e1.jsonl",
            "generation": {"maxCompletionTokens": 6, "samplesPerPrompt": 2, "temperature": 1.0},
            "metrics": [
                {"name": "correct", "kind": "match", "mode": "final-number"},
                {"kind": "loss"},
            ],
            "samples": "evaluations/ev1/samples.jsonl",
        }
    )
    with OtlpReceiver() as receiver:
        spec = TaskSpec(
            task_id="ev1",
            kind="evaluate",
            project="maths",
            trainer_url=report_server.url,
            storage_url=store.url,
            params=params.to_json(),
            telemetry=TaskTelemetry(
                collector_endpoint=receiver.endpoint,
                traceparent=f"00-{TRACE_ID}-{SUBMIT_SPAN}-01",
            ),
        )
        assert run(spec, report_server, tmp_path) == 0
        result = report_server.of("finished")[0]["result"]

        root = receiver.wait_for_span(P + "evaluation")
        assert root.trace_id == TRACE_ID and root.parent_span_id == SUBMIT_SPAN
        assert root.attributes[c.EVALUATION_ID] == "ev1"
        assert root.resource[c.EVALUATION_ID] == "ev1"
        assert root.resource[c.PROJECT] == "maths"
        parts = [receiver.wait_for_span(P + "evaluation." + part) for part in c.EVALUATION_PHASES]
        assert all(s.trace_id == TRACE_ID and s.parent_span_id == root.span_id for s in parts)

        means = receiver.wait_for_metric(P + "evaluation.metric.mean")
        assert means.resource[c.EVALUATION_ID] == "ev1"
        published = {p.attributes[c.EVALUATION_METRIC]: p.value for p in means.points}
        assert published == {m["name"]: m["mean"] for m in result["metrics"]}
        lows = receiver.wait_for_metric(P + "evaluation.metric.low").points
        assert {p.attributes[c.EVALUATION_METRIC]: p.value for p in lows} == {
            m["name"]: m["low"] for m in result["metrics"]
        }
        samples = receiver.wait_for_metric(P + "evaluation.samples").points
        assert [p.value for p in samples] == [result["sampleCount"]] == [6]
        scored = receiver.wait_for_metric(P + "evaluation.samples.scored").points
        assert [p.value for p in scored] == [6]
        durations = receiver.wait_for_metric(P + "evaluation.phase.duration").points
        assert sorted(p.attributes[c.EVALUATION_PHASE] for p in durations) == sorted(
            c.EVALUATION_PHASES
        )
        assert all(p.count == 1 and p.sum is not None and p.sum >= 0 for p in durations)
        lengths = receiver.wait_for_metric(P + "evaluation.completion.length").points
        assert [p.count for p in lengths] == [6]
