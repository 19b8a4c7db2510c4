"""The front door's GenAI metrics through the API in this process: requests to an endpoint
served by a real engine (the tiny chat model, in this process) count in the histograms with
the conventions' attributes and the endpoint's labels, and ``/metrics`` shows them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from akka_training.core.states import TaskState
from akka_training.storage.models import Task
from akka_training.testing.app import InProcessTrainer

CHAT = {"model": "tiny-chat", "messages": [{"role": "user", "content": "What is 2 + 3?"}]}


@pytest.fixture
def engine_address(trainer: InProcessTrainer, api: httpx.Client) -> Iterator[str]:
    """Endpoint `chat` of project maths, READY: its task runs and reports the address of a
    real engine serving the base model in this process."""
    from akka_training.engines.generation.engine import GenerationEngine
    from akka_training.engines.serving.http_server import EndpointServer

    created = api.post(
        "/v1/endpoints", json={"project": "maths", "name": "chat", "baseModel": "tiny-chat"}
    )
    assert created.status_code == 201, created.text
    base = Path(api.get("/v1/base-models/tiny-chat").json()["path"])
    server = EndpointServer(GenerationEngine(base), "the-key").start()
    try:
        with trainer.ctx.db.session() as session:
            task = session.get(Task, created.json()["id"])
            assert task is not None
            task.state = TaskState.RUNNING
            task.progress = {"address": server.address, "key": server.key}
        yield server.address
    finally:
        server.close()


def samples(api: httpx.Client, name: str) -> list[tuple[dict[str, str], float]]:
    scraped = api.get("/metrics")
    assert scraped.status_code == 200
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
        if s.name == name
    ]


def test_requests_through_the_front_door_count_in_the_genai_histograms(
    api: httpx.Client, engine_address: str
) -> None:
    streamed = api.post(
        "/openai/v1/chat/completions",
        json={**CHAT, "max_tokens": 6, "temperature": 0, "stream": True},
    )
    assert streamed.status_code == 200
    events = [
        json.loads(line.removeprefix("data: "))
        for line in streamed.text.splitlines()
        if line.startswith("data: {")
    ]
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] > 1
    whole = api.post(
        "/openai/v1/completions", json={"model": "tiny-chat", "prompt": "2 + 3 =", "max_tokens": 3}
    )
    assert whole.status_code == 200

    ours = {
        "gen_ai_provider_name": "akka.training",
        "gen_ai_request_model": "tiny-chat",
        "gen_ai_response_model": "tiny-chat",
        "akka_optimize_training_project": "maths",
        "akka_optimize_training_endpoint": "chat",
    }

    def by_operation(name: str) -> dict[str, float]:
        found: dict[str, float] = {}
        for labels, value in samples(api, name):
            assert labels.items() >= ours.items(), labels
            assert "error_type" not in labels
            found[labels["gen_ai_operation_name"]] = value
        return found

    counted = by_operation("gen_ai_server_request_duration_seconds_count")
    assert counted == {"chat": 1.0, "text_completion": 1.0}
    # Only the stream has a first token to time.
    assert by_operation("gen_ai_server_time_to_first_token_seconds_count") == {"chat": 1.0}
    assert by_operation("gen_ai_server_time_per_output_token_seconds_count") == {"chat": 1.0}
    tokens: dict[tuple[str, str], float] = {}
    for labels, value in samples(api, "gen_ai_client_token_usage_sum"):
        assert labels.items() >= ours.items(), labels
        tokens[(labels["gen_ai_operation_name"], labels["gen_ai_token_type"])] = value
    whole_usage: dict[str, Any] = whole.json()["usage"]
    assert tokens == {
        ("chat", "input"): usage["prompt_tokens"],
        ("chat", "output"): usage["completion_tokens"],
        ("text_completion", "input"): whole_usage["prompt_tokens"],
        ("text_completion", "output"): whole_usage["completion_tokens"],
    }


def test_a_refused_request_counts_with_its_error_type(
    trainer: InProcessTrainer, api: httpx.Client
) -> None:
    created = api.post(
        "/v1/endpoints", json={"project": "maths", "name": "chat", "baseModel": "tiny-chat"}
    )
    assert created.status_code == 201
    starting = api.post("/openai/v1/chat/completions", json=CHAT)
    assert starting.status_code == 503
    unknown = api.post("/openai/v1/chat/completions", json={**CHAT, "model": "nosuchmodel"})
    assert unknown.status_code == 404  # no endpoint: not counted
    counted = samples(api, "gen_ai_server_request_duration_seconds_count")
    assert [
        (labels["error_type"], labels["gen_ai_request_model"], value) for labels, value in counted
    ] == [("503", "tiny-chat", 1.0)]
    assert samples(api, "gen_ai_client_token_usage_count") == []
