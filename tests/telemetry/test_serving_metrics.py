"""The front door's GenAI histograms, measured from answers as the endpoint writes them (a
stream cut anywhere, a whole answer, a refusal), on a clock the test moves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from akka_training.telemetry.serving_metrics import ServingMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Scrape:
    def __init__(self) -> None:
        self.clock = Clock()
        self.registry = CollectorRegistry(auto_describe=False)
        self.provider = MeterProvider(
            metric_readers=[
                PrometheusMetricReader(scope_info_enabled=False, registry=self.registry)
            ]
        )
        self.metrics = ServingMetrics(self.provider.get_meter("test"), self.clock)

    def samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """The samples of the series `name` (such as ``..._count``): labels and value."""
        text = generate_latest(self.registry).decode()
        return [
            (dict(s.labels), s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name
        ]


@pytest.fixture
def scrape() -> Iterator[Scrape]:
    s = Scrape()
    yield s
    s.provider.shutdown()


def event(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def chat_chunk(content: str | None, role: bool = False) -> dict[str, Any]:
    delta: dict[str, Any] = {} if content is None else {"content": content}
    if role:
        delta["role"] = "assistant"
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    return {"id": "c", "object": "chat.completion.chunk", "model": "run-1", "choices": [choice]}


USAGE = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
LABELS = {
    "gen_ai_operation_name": "chat",
    "gen_ai_provider_name": "akka.training",
    "gen_ai_request_model": "run-1",
    "gen_ai_response_model": "run-1",
    "akka_optimize_training_project": "maths",
    "akka_optimize_training_endpoint": "chat",
}


def test_a_stream_times_its_first_text_and_each_token_after_it(scrape: Scrape) -> None:
    exchange = scrape.metrics.exchange("chat", "run-1", "maths", "chat")
    exchange.streaming("text/event-stream; charset=utf-8")
    stream = b"".join(
        [
            event(chat_chunk("", role=True)),  # the role alone is no token yet
            event(chat_chunk("The")),
            event(chat_chunk(" answer")),
            event({"id": "c", "model": "run-1", "choices": [], "usage": USAGE}),
            b"data: [DONE]\n\n",
        ]
    )
    first_text = stream.index(b'"The"')
    scrape.clock.now += 0.5
    exchange.feed(stream[:first_text])  # the role chunk, and part of the next event
    scrape.clock.now += 0.25
    exchange.feed(stream[first_text:])  # the first text arrives whole here
    scrape.clock.now += 1.0
    exchange.finish(200)

    assert scrape.samples("gen_ai_server_request_duration_seconds_sum") == [(LABELS, 1.75)]
    assert scrape.samples("gen_ai_server_time_to_first_token_seconds_sum") == [(LABELS, 0.75)]
    # (1.0 s from the first token to the end) / (5 - 1) tokens after it.
    assert scrape.samples("gen_ai_server_time_per_output_token_seconds_sum") == [(LABELS, 0.25)]
    tokens = scrape.samples("gen_ai_client_token_usage_sum")
    assert sorted((labels["gen_ai_token_type"], value) for labels, value in tokens) == [
        ("input", 7.0),
        ("output", 5.0),
    ]
    assert all(labels.items() >= LABELS.items() for labels, _ in tokens)
    buckets = dict(
        (labels["le"], value)
        for labels, value in scrape.samples("gen_ai_server_time_to_first_token_seconds_bucket")
    )
    assert (buckets["0.5"], buckets["1.0"]) == (0.0, 1.0)


def test_a_whole_answer_counts_its_tokens_and_has_no_first_token(scrape: Scrape) -> None:
    exchange = scrape.metrics.exchange("text_completion", "tiny-chat", "maths", "chat")
    exchange.streaming("application/json")
    body = json.dumps(
        {
            "id": "t",
            "object": "text_completion",
            "model": "tiny-chat",
            "choices": [],
            "usage": USAGE,
        }
    ).encode()
    exchange.feed(body[:10])
    exchange.feed(body[10:])
    scrape.clock.now += 2.0
    exchange.finish(200)
    (labels, value), *_ = scrape.samples("gen_ai_server_request_duration_seconds_sum")
    assert (labels["gen_ai_operation_name"], labels["gen_ai_response_model"], value) == (
        "text_completion",
        "tiny-chat",
        2.0,
    )
    assert "error_type" not in labels
    assert len(scrape.samples("gen_ai_client_token_usage_count")) == 2
    assert scrape.samples("gen_ai_server_time_to_first_token_seconds_count") == []
    assert scrape.samples("gen_ai_server_time_per_output_token_seconds_count") == []


def test_failures_carry_their_error_type_and_count_no_tokens(scrape: Scrape) -> None:
    refused = scrape.metrics.exchange("chat", "run-1", "maths", "chat")
    refused.refused(503)
    refused.finish(503)  # a second end is not counted again
    bad = scrape.metrics.exchange("chat", "run-1", "maths", "chat")
    bad.streaming("application/json")
    bad.feed(json.dumps({"error": {"message": "temperature must be 0 or more"}}).encode())
    bad.finish(400)
    gone = scrape.metrics.exchange("chat", "run-1", "maths", "chat")
    gone.streaming("text/event-stream")
    gone.feed(event(chat_chunk("The")))
    gone.finish(200, asyncio.CancelledError())
    broken = scrape.metrics.exchange("chat", "run-1", "maths", "chat")
    broken.streaming("text/event-stream")
    broken.finish(200, ConnectionResetError())

    counts = {
        labels["error_type"]: value
        for labels, value in scrape.samples("gen_ai_server_request_duration_seconds_count")
    }
    assert counts == {"503": 1.0, "400": 1.0, "cancelled": 1.0, "ConnectionResetError": 1.0}
    assert scrape.samples("gen_ai_client_token_usage_count") == []
    assert scrape.samples("gen_ai_server_time_to_first_token_seconds_count") == []


def test_a_caller_that_closes_after_done_counts_a_whole_answer(scrape: Scrape) -> None:
    # The openai SDK closes its connection as soon as it reads `[DONE]`, which can be before the
    # relay reads the endpoint's end: the caller had every token, so nothing failed.
    exchange = scrape.metrics.exchange("chat", "run-1", "maths", "chat")
    exchange.streaming("text/event-stream")
    scrape.clock.now += 0.5
    exchange.feed(event(chat_chunk("The")) + event(chat_chunk(" answer")))
    scrape.clock.now += 1.0
    exchange.feed(event({"id": "c", "model": "run-1", "choices": [], "usage": USAGE}))
    exchange.feed(b"data: [DONE]\n\n")
    exchange.finish(200, asyncio.CancelledError())

    (labels, _), *_ = scrape.samples("gen_ai_server_request_duration_seconds_count")
    assert "error_type" not in labels
    assert scrape.samples("gen_ai_server_time_to_first_token_seconds_sum") == [(LABELS, 0.5)]
    assert len(scrape.samples("gen_ai_client_token_usage_count")) == 2
