"""The catalog's job spans are the spans real runs send: a supervised run with an evaluation
and a save, and a reinforcement run, each through the job entry point to a loopback OTLP
receiver. Each step's phases are children of its step span, in the run's trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from akka_training.telemetry import catalog as c
from akka_training.testing.otlp_receiver import OtlpReceiver
from tests.engines.conftest import ReportServer
from tests.engines.jobs import make_spec, put_dataset, run_in_process
from tests.engines.rows import chat_rows

pytestmark = pytest.mark.slow

P = c.PREFIX
SFT = {
    "method": "sft",
    "maxSeqLength": 64,
    "hyperparams": {
        "lora": {"rank": 4},
        "training": {"maxSteps": 2, "batchSize": 4, "validationFrequencySteps": 2},
    },
}
GRPO = {
    "method": "grpo",
    "maxSeqLength": 256,
    "rlHyperparams": {
        "promptsPerStep": 2,
        "generationsPerPrompt": 2,
        "maxCompletionTokens": 8,
        "lora": {"rank": 4},
        "training": {"maxSteps": 2},
    },
    "reward": {"terms": [{"name": "correct", "kind": "match", "mode": "contains"}]},
}


def test_the_job_spans_a_run_sends_are_the_catalog_s(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    with OtlpReceiver() as receiver:
        runs: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
            (
                "sft",
                SFT,
                {
                    "eval_dataset": put_dataset(store, "maths-eval", chat_rows(4, seed=1)),
                    "execution": {"saveEvery": 2},
                },
            ),
            ("grpo", GRPO, {}),
        ]
        for name, config, extra in runs:
            spec = make_spec(
                model=catalog["tiny-chat"],
                dataset=put_dataset(store, f"maths-{name}", chat_rows(8)),
                config=config,
                trainer_url=report_server.url,
                store=store,
                run_id=f"run-{name}",
                **extra,
            )
            spec.telemetry.collector_endpoint = receiver.endpoint
            assert run_in_process(spec, tmp_path / name) == 0
        receiver.wait_for_span(P + "rl.update")
        spans = receiver.spans()

    sent = {s.name for s in spans}
    job_spans = {s.name for s in c.SPANS if s.publisher is c.Publisher.JOB}
    assert sent == job_spans
    assert {s.resource["service.name"] for s in spans} == {"akka-training-job"}

    by_id = {s.span_id: s for s in spans}
    for child in ("job.evaluation", "job.snapshot.save", "rl.generation", "rl.reward", "rl.update"):
        for span in (s for s in spans if s.name == P + child):
            parent = by_id[span.parent_span_id or ""]
            assert parent.name == P + "job.step", child
            assert parent.attributes[c.STEP] == span.attributes[c.STEP]
            assert span.trace_id == parent.trace_id
    steps = [s for s in spans if s.name == P + "job.step"]
    roots = {s.span_id: s for s in spans if s.name == P + "job"}
    assert all(by_id[s.parent_span_id or ""].span_id in roots for s in steps)
    grpo_steps = [s for s in steps if s.resource[c.RUN_ID] == "run-grpo"]
    assert sorted(s.attributes[c.STEP] for s in grpo_steps) == [1, 2]
    for step in grpo_steps:
        phases = sorted(
            by_id[s.span_id].name.removeprefix(P) for s in spans if s.parent_span_id == step.span_id
        )
        assert phases == ["rl.generation", "rl.reward", "rl.update"]
