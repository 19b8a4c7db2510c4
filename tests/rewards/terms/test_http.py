"""The http term against a real HTTP server on 127.0.0.1. Its budget and its waits between
tries count a `ManualClock`'s seconds: a wait passes at once, and the tests read how long it
was from the clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from akka_training.core.clock import ManualClock
from akka_training.core.plans import HttpTerm
from akka_training.rewards.scorer import RewardScorer
from akka_training.rewards.scoring import ScoredBatch

from ..servers import Reply, ScriptedServer, rollout

Serve = Callable[[Callable[[str, Any], Reply]], ScriptedServer]
CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is six times seven?"},
]


def evaluator(url: str, timeout: float = 5.0) -> HttpTerm:
    return HttpTerm(
        name="eval",
        kind="http",
        weight=0.5,
        url=url,
        timeout_seconds=timeout,
        headers={"X-Team": "maths"},
    )


def score(term: HttpTerm, count: int = 1, clock: ManualClock | None = None) -> ScoredBatch:
    with RewardScorer([term], clock=clock or ManualClock()) as scorer:
        return scorer.score([rollout(prompt=CHAT) for _ in range(count)])


def test_a_score_and_explanation_are_read(serve: Serve) -> None:
    server = serve(lambda path, body: Reply({"score": 0.6, "explanation": "partly right"}))
    batch = score(evaluator(server.url + "/grade"))
    result = batch.rollouts[0]
    assert (result.values, result.shares) == ({"eval": 0.6}, {"eval": 0.3})
    assert result.explanations == {"eval": "partly right"}
    path, body, headers = server.requests[0]
    assert path == "/grade"
    assert body == {"input": CHAT, "output": "the answer\n#### 42", "expected": "#### 42"}
    assert headers["X-Team"] == "maths"


@pytest.mark.parametrize(("ok", "value"), [(True, 1.0), (False, 0.0)])
def test_ok_counts_as_one_or_zero(serve: Serve, ok: bool, value: float) -> None:
    server = serve(lambda path, body: Reply({"ok": ok}))
    batch = score(evaluator(server.url))
    assert batch.rollouts[0].values == {"eval": value}
    assert batch.rollouts[0].failures == {}


@pytest.mark.parametrize(
    "body", [{"score": 1.5}, {"score": True}, {"ok": "yes"}, {"verdict": "pass"}, [0.5]]
)
def test_an_answer_without_a_verdict_scores_zero_with_cause_no_verdict(
    serve: Serve, body: Any
) -> None:
    server = serve(lambda path, _: Reply(body))
    batch = score(evaluator(server.url), count=2)
    assert batch.scores == [0.0, 0.0]
    assert batch.rollouts[0].failures == {"eval": "no-verdict"}
    assert batch.stats.failures == {("eval", "no-verdict"): 2}


def test_an_answer_that_is_not_json_has_no_verdict(serve: Serve) -> None:
    server = serve(lambda path, _: Reply(raw=b"<html>ok</html>"))
    assert score(evaluator(server.url)).rollouts[0].failures == {"eval": "no-verdict"}


def test_a_slow_evaluator_scores_zero_with_cause_timeout(serve: Serve) -> None:
    # The server would answer after a minute: the term gives up at its 0.3 s.
    server = serve(lambda path, body: Reply({"score": 1.0}, delay=60.0))
    batch = score(evaluator(server.url, timeout=0.3), count=3)
    assert batch.rollouts[0].failures == {"eval": "timeout"}
    assert "did not answer within 0.3 s" in batch.rollouts[0].explanations["eval"]
    assert batch.stats.failures == {("eval", "timeout"): 3}


def test_a_refused_connection_scores_zero_with_cause_connect(closed_port: int) -> None:
    batch = score(evaluator(f"http://127.0.0.1:{closed_port}/grade"))
    assert batch.rollouts[0].failures == {"eval": "connect"}
    assert batch.stats.failures == {("eval", "connect"): 1}


@pytest.mark.parametrize("status", [500, 404, 302])
def test_a_status_other_than_2xx_scores_zero_with_cause_http_status(
    serve: Serve, status: int
) -> None:
    server = serve(lambda path, body: Reply({"score": 1.0}, status=status))
    batch = score(evaluator(server.url, timeout=0.5))  # a 500 is retried for the 0.5 s
    assert batch.rollouts[0].failures == {"eval": "http-status"}
    assert f"HTTP {status}" in batch.rollouts[0].explanations["eval"]


def test_a_malformed_url_fails_with_cause_error() -> None:
    batch = score(evaluator("ftp://127.0.0.1/grade"))
    assert batch.rollouts[0].failures == {"eval": "error"}


def test_a_rate_limit_is_waited_out_and_the_retry_counted(serve: Serve) -> None:
    answers = iter([Reply({"error": "slow down"}, status=429, headers={"Retry-After": "0"})])
    server = serve(lambda path, body: next(answers, Reply({"score": 0.6})))
    batch = score(evaluator(server.url))
    result = batch.rollouts[0]
    assert (result.values, result.failures) == ({"eval": 0.6}, {})
    assert result.retries == {"eval": 1}
    assert batch.stats.retries == {"eval": 1}
    assert batch.stats.failures == {}
    assert len(server.requests) == 2


def test_retry_after_is_honoured(serve: Serve) -> None:
    answers = iter([Reply({}, status=503, headers={"Retry-After": "0.6"})])
    server = serve(lambda path, body: next(answers, Reply({"ok": True})))
    clock = ManualClock()
    batch = score(evaluator(server.url, timeout=3.0), clock=clock)
    assert clock.monotonic() == 0.6  # waited what it asked, no more
    assert batch.rollouts[0].values == {"eval": 1.0}
    assert batch.stats.retries == {"eval": 1}


def test_an_endpoint_that_stays_unavailable_scores_zero_once_the_budget_is_spent(
    serve: Serve,
) -> None:
    server = serve(lambda path, body: Reply({"error": "unavailable"}, status=503))
    clock = ManualClock()
    batch = score(evaluator(server.url, timeout=1.5), clock=clock)
    result = batch.rollouts[0]
    # Tried again and again within its 1.5 s, and no longer: the last wait left the last try
    # its least time (0.05 s), and none came after it.
    assert clock.monotonic() == pytest.approx(1.45)
    assert len(server.requests) >= 3
    assert result.failures == {"eval": "http-status"}
    assert batch.stats.failures == {("eval", "http-status"): 1}
    tries = len(server.requests)
    assert result.retries == {"eval": tries - 1}
    assert batch.stats.retries == {"eval": tries - 1}
    assert result.explanations["eval"] == (
        f'{server.url} answered HTTP 503: {{"error": "unavailable"}} '
        f"({tries} tries in the term's 1.5 s)"
    )


def test_a_retry_after_past_the_budget_is_not_waited(serve: Serve) -> None:
    server = serve(lambda path, body: Reply({}, status=429, headers={"Retry-After": "60"}))
    clock = ManualClock()
    batch = score(evaluator(server.url, timeout=2.0), clock=clock)
    assert clock.monotonic() == 0.0  # not waited at all
    assert len(server.requests) == 1
    assert batch.rollouts[0].failures == {"eval": "http-status"}
    assert batch.rollouts[0].explanations["eval"] == (
        f"{server.url} answered HTTP 429: {{}} (it asked to wait 60 s (Retry-After), past the "
        "term's 2 s)"
    )
    assert batch.stats.retries == {"eval": 0}


def test_a_client_error_is_not_retried(serve: Serve) -> None:
    server = serve(lambda path, body: Reply({"error": "bad request"}, status=400))
    batch = score(evaluator(server.url))
    assert len(server.requests) == 1
    assert batch.rollouts[0].failures == {"eval": "http-status"}
    assert batch.stats.retries == {"eval": 0}
