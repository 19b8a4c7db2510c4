"""The judge term against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from akka_training.core.clock import ManualClock
from akka_training.core.plans import JudgeTerm
from akka_training.rewards.inputs import RewardSetupError
from akka_training.rewards.scorer import RewardScorer
from akka_training.rewards.scoring import ScoredBatch

from ..servers import Reply, ScriptedServer, rollout

Serve = Callable[[Callable[[str, Any], Reply]], ScriptedServer]


def chat_reply(content: str, prompt_tokens: int = 120, completion_tokens: int = 9) -> Reply:
    return Reply(
        {
            "id": "chatcmpl-1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        }
    )


def judge(endpoint: str, timeout: float = 5.0, **extra: Any) -> JudgeTerm:
    return JudgeTerm(
        name="judge",
        kind="judge",
        weight=2.0,
        endpoint=endpoint,
        model="grader-7b",
        instructions="Grade the answer's correctness.",
        timeout_seconds=timeout,
        max_tokens=64,
        **extra,
    )


def score(term: JudgeTerm, count: int = 1, clock: ManualClock | None = None) -> ScoredBatch:
    """Score `count` rollouts; the judge's budget and waits count `clock`'s seconds (a wait
    passes at once)."""
    with RewardScorer([term], clock=clock or ManualClock()) as scorer:
        return scorer.score([rollout() for _ in range(count)])


def test_a_verdict_scores_and_its_tokens_are_counted(serve: Serve) -> None:
    server = serve(lambda path, body: chat_reply('{"score": 0.8, "explanation": "close"}'))
    batch = score(judge(server.url + "/v1/"), count=3)
    assert [r.values["judge"] for r in batch.rollouts] == [0.8, 0.8, 0.8]
    assert batch.rollouts[0].shares["judge"] == pytest.approx(1.6)
    assert batch.rollouts[0].explanations == {"judge": "close"}
    assert batch.rollouts[0].failures == {}
    assert batch.stats.judge_prompt_tokens == {"judge": 360}
    assert batch.stats.judge_completion_tokens == {"judge": 27}
    assert batch.stats.failures == {}
    path, body, _ = server.requests[0]
    assert path == "/v1/chat/completions"
    assert body["model"] == "grader-7b" and body["max_tokens"] == 64
    assert body["messages"][0] == {"role": "system", "content": "Grade the answer's correctness."}
    user = body["messages"][1]
    assert user["role"] == "user"
    for part in ("What is six times seven?", "the answer\n#### 42", "#### 42"):
        assert part in user["content"]


@pytest.mark.parametrize(
    ("content", "value"),
    [
        ("The answer is right.\nSCORE: 0.5", 0.5),
        ("score = 1", 1.0),
        ("0", 0.0),
        ('```json\n{"score": 0.25}\n```', 0.25),
    ],
)
def test_a_verdict_is_read_in_each_accepted_form(serve: Serve, content: str, value: float) -> None:
    server = serve(lambda path, body: chat_reply(content))
    batch = score(judge(server.url + "/v1"))
    assert batch.rollouts[0].values["judge"] == value
    assert batch.rollouts[0].failures == {}


@pytest.mark.parametrize("content", ["Looks fine to me.", "SCORE: 7", '{"score": "high"}', ""])
def test_a_reply_without_a_verdict_scores_zero_and_still_counts_tokens(
    serve: Serve, content: str
) -> None:
    server = serve(lambda path, body: chat_reply(content, 50, 4))
    batch = score(judge(server.url + "/v1"), count=2)
    assert [r.values["judge"] for r in batch.rollouts] == [0.0, 0.0]
    assert batch.rollouts[0].failures == {"judge": "no-verdict"}
    assert batch.stats.failures == {("judge", "no-verdict"): 2}
    assert batch.stats.judge_prompt_tokens == {"judge": 100}
    assert batch.stats.judge_completion_tokens == {"judge": 8}


def test_a_reply_that_is_not_a_chat_completion_has_no_verdict(serve: Serve) -> None:
    server = serve(lambda path, body: Reply({"unexpected": True}))
    batch = score(judge(server.url + "/v1"))
    assert batch.rollouts[0].failures == {"judge": "no-verdict"}


def test_a_judge_slower_than_its_timeout_scores_zero_with_cause_timeout(serve: Serve) -> None:
    # The server would answer after a minute: each call gives up at its 0.3 s.
    server = serve(lambda path, body: Reply(delay=60.0, body={}))
    batch = score(judge(server.url + "/v1", timeout=0.3), count=4)
    assert batch.scores == [0.0] * 4
    assert batch.rollouts[0].failures == {"judge": "timeout"}
    assert "0.3 s" in batch.rollouts[0].explanations["judge"]
    assert batch.stats.failures == {("judge", "timeout"): 4}
    assert len(batch.stats.seconds["judge"]) == 4


def test_a_closed_port_scores_zero_with_cause_connect(closed_port: int) -> None:
    batch = score(judge(f"http://127.0.0.1:{closed_port}/v1"), count=2)
    assert batch.scores == [0.0, 0.0]
    assert batch.rollouts[0].failures == {"judge": "connect"}
    assert batch.stats.failures == {("judge", "connect"): 2}
    assert batch.stats.judge_prompt_tokens == {"judge": 0}


def test_an_error_status_scores_zero_with_cause_http_status(serve: Serve) -> None:
    server = serve(lambda path, body: Reply({"error": "overloaded"}, status=500))
    batch = score(judge(server.url + "/v1", timeout=0.5))  # retried for the 0.5 s
    assert batch.rollouts[0].failures == {"judge": "http-status"}
    assert "HTTP 500" in batch.rollouts[0].explanations["judge"]
    assert batch.stats.failures == {("judge", "http-status"): 1}


def test_the_api_key_travels_as_a_bearer_token(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRADER_KEY", "s3cret")
    server = serve(lambda path, body: chat_reply("SCORE: 1"))
    score(judge(server.url + "/v1", api_key_env="GRADER_KEY"))
    assert server.requests[0][2]["Authorization"] == "Bearer s3cret"


def test_a_missing_api_key_variable_refuses_the_reward(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRADER_KEY", raising=False)
    with pytest.raises(RewardSetupError, match="'GRADER_KEY' named by apiKeyEnv is not set"):
        RewardScorer([judge("http://127.0.0.1:9/v1", api_key_env="GRADER_KEY")])


def test_a_provider_s_rate_limit_is_retried_and_the_verdict_counted(serve: Serve) -> None:
    # A provider's brief rate limit: each rollout's first call is answered 429.
    seen: set[str] = set()

    def respond(path: str, body: Any) -> Reply:
        key = body["messages"][1]["content"]
        if key in seen:
            return chat_reply('{"score": 0.9}')
        seen.add(key)
        return Reply({"error": {"message": "rate limited"}}, status=429)

    server = serve(respond)
    rollouts = [rollout(completion=f"answer {i}") for i in range(3)]
    with RewardScorer([judge(server.url + "/v1")], clock=ManualClock()) as scorer:
        batch = scorer.score(rollouts)
    assert batch.scores == [pytest.approx(1.8)] * 3
    assert batch.stats.failures == {}
    assert batch.stats.retries == {"judge": 3}
    assert batch.stats.judge_prompt_tokens == {"judge": 360}
    assert len(server.requests) == 6


def test_a_judge_that_always_answers_503_scores_zero_when_its_budget_is_spent(
    serve: Serve,
) -> None:
    server = serve(lambda path, body: Reply({"error": "unavailable"}, status=503))
    clock = ManualClock()
    batch = score(judge(server.url + "/v1", timeout=1.0), count=2, clock=clock)
    # Both tried until their 1 s left the last try its least time (0.05 s), and no longer.
    assert clock.monotonic() == pytest.approx(0.95)
    assert batch.scores == [0.0, 0.0]
    assert batch.stats.failures == {("judge", "http-status"): 2}
    assert batch.stats.retries["judge"] == len(server.requests) - 2 >= 2
    assert "tries in the term's 1 s" in batch.rollouts[0].explanations["judge"]
