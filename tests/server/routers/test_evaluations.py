"""The evaluations routes' telemetry: a submission is a span of the service's, with the
evaluation's id, project and resolved dataset, and the evaluation's job is launched with that
span's traceparent (its spans join the submission's trace) and the collector endpoint."""

from __future__ import annotations

from typing import Any

import pytest

from akka_training.controller.loop import Controller
from akka_training.controller.tasks import prepare_task_launch
from akka_training.core.tasks import TaskSpec
from akka_training.testing.otlp_receiver import OtlpReceiver
from tests.server.routers.helpers import register

ROWS = (
    b'{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}\n'
)


# An in-process trainer with an OTLP receiver: kept out of the fast layer.
@pytest.mark.slow
def test_an_evaluation_submission_is_a_span(in_process_factory: Any) -> None:
    with OtlpReceiver() as receiver:
        trainer = in_process_factory(
            {
                "trainer": {
                    "projects": [{"name": "maths"}],
                    "telemetry": {"collector-endpoint": receiver.endpoint},
                }
            }
        )
        api = trainer.client()
        registered = register(api, "maths/held-out", ROWS)
        plan = {
            "kind": "evaluation",
            "project": "maths",
            "baseModel": "tiny-chat",
            "dataset": "maths/held-out",
            "metrics": [{"name": "correct", "kind": "match"}],
        }
        response = api.post("/v1/evaluations", json=plan)
        assert response.status_code == 200, response.text
        evaluation = response.json()
        controller = Controller(trainer.ctx)
        controller._observe()
        controller._admit()
        launch = prepare_task_launch(trainer.ctx, evaluation["id"])
        trainer.close()
        span = receiver.wait_for_span("akka.optimize.training.evaluation.submit")
    assert launch is not None
    spec = TaskSpec.model_validate(launch.job_spec)
    traceparent = spec.telemetry.traceparent or ""
    # version-trace-span-flags: the job's root span is a child of the submission's.
    assert traceparent.split("-")[1:3] == [span.trace_id, span.span_id]
    assert spec.telemetry.collector_endpoint == receiver.endpoint
    assert launch.env["TRACEPARENT"] == traceparent
    assert evaluation["state"] == "PENDING" and evaluation["dataset"] == registered["ref"]
    assert span.attributes == {
        "akka.optimize.training.project": "maths",
        "akka.optimize.training.evaluation.id": evaluation["id"],
        "akka.optimize.training.dataset": registered["ref"],
    }
