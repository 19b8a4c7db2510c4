"""The front door's GenAI metrics through the real service, its controller and an endpoint's
job on the local backend: a streamed chat with the official `openai` SDK and a whole
completion count in the histograms, and the trainer's ``/metrics`` shows them with the
conventions' attributes and the endpoint's labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests.integration.helpers import ensure_project

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory, dev_models: Path) -> Any:
    t = TrainerProcess(
        tmp_path_factory.mktemp("endpoint-metrics"),
        {
            "trainer": {
                "dev-models-dir": str(dev_models),
                "controller": {"interval-seconds": 0.2},
                "pools": [{"name": "default", "accelerator": "cpu", "devices": 1}],
            }
        },
    ).start()
    ensure_project(t, "demo")
    yield t
    t.close()


def samples(trainer: TrainerProcess, name: str) -> list[tuple[dict[str, str], float]]:
    scraped = httpx.get(
        f"{trainer.url}/metrics", headers={"Authorization": f"Bearer {trainer.admin_token}"}
    )
    assert scraped.status_code == 200, scraped.text
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
        if s.name == name
    ]


def test_an_endpoints_requests_show_in_the_genai_metrics(trainer: TrainerProcess) -> None:
    with trainer.client() as admin:
        key = admin.create_token("demo-key", ["demo"]).token
    trainer.cli(
        "training", "endpoints", "create", "talk", "--base", "tiny-chat", "--project", "demo"
    )
    until(
        lambda: (
            trainer.cli_json("training", "endpoints", "get", "talk", "--project", "demo")["phase"]
            == "READY"
        ),
        what="the endpoint to be READY",
        timeout=180,
        detail=lambda: trainer.log()[-3000:],
    )
    client = openai.OpenAI(base_url=f"{trainer.url}/openai/v1", api_key=key, max_retries=0)
    pieces, usage = [], None
    for chunk in client.chat.completions.create(
        model="tiny-chat",
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        max_tokens=6,
        temperature=0,
        stream=True,
    ):
        pieces += [c.delta.content or "" for c in chunk.choices]
        usage = chunk.usage or usage
    assert "".join(pieces) and usage is not None
    whole = client.completions.create(model="tiny-chat", prompt="2 + 3 =", max_tokens=3)
    assert whole.usage is not None

    labels = {
        "gen_ai_provider_name": "akka.training",
        "gen_ai_request_model": "tiny-chat",
        "gen_ai_response_model": "tiny-chat",
        "akka_optimize_training_project": "demo",
        "akka_optimize_training_endpoint": "talk",
    }

    def counts(name: str) -> dict[str, float]:
        found = {}
        for got, value in samples(trainer, name):
            assert got.items() >= labels.items(), got
            assert "error_type" not in got, got  # the SDK closes after [DONE]: no failure
            found[got["gen_ai_operation_name"]] = value
        return found

    # The stream is recorded when its relay ends, which may be just after the caller has it.
    until(
        lambda: (
            counts("gen_ai_server_request_duration_seconds_count")
            == {"chat": 1.0, "text_completion": 1.0}
        ),
        what="both requests to be recorded",
        timeout=30,
    )
    assert counts("gen_ai_server_time_to_first_token_seconds_count") == {"chat": 1.0}
    tokens = {
        (got["gen_ai_operation_name"], got["gen_ai_token_type"]): value
        for got, value in samples(trainer, "gen_ai_client_token_usage_sum")
    }
    assert tokens == {
        ("chat", "input"): usage.prompt_tokens,
        ("chat", "output"): usage.completion_tokens,
        ("text_completion", "input"): whole.usage.prompt_tokens,
        ("text_completion", "output"): whole.usage.completion_tokens,
    }
    assert usage.completion_tokens > 1  # so the stream has a time per output token
    assert counts("gen_ai_server_time_per_output_token_seconds_count") == {"chat": 1.0}
    trainer.cli("training", "endpoints", "delete", "talk", "--project", "demo")
