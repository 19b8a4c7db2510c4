"""The scorer: bounded concurrency, time limits, accounting, and no failure escaping."""

from __future__ import annotations

import asyncio
import fcntl
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from akka_training.core.plans import HttpTerm, JudgeTerm, MatchTerm, RegexTerm, Reward, RuleTerm
from akka_training.rewards.bundles import pack_bundle, unpack_bundle
from akka_training.rewards.inputs import RewardSetupError
from akka_training.rewards.scorer import RewardScorer
from akka_training.rewards.terms import TermSpec
from akka_training.rewards.terms.regex import RegexGrader

from .servers import Reply, ScriptedServer, rollout

Serve = Callable[[Callable[[str, Any], Reply]], ScriptedServer]


def http_term(url: str, timeout: float = 10.0, name: str = "eval") -> HttpTerm:
    return HttpTerm(name=name, kind="http", url=url, timeout_seconds=timeout)


def test_shares_sum_to_the_score_and_every_term_is_accounted(serve: Serve) -> None:
    server = serve(
        lambda path, body: Reply(
            {
                "choices": [{"message": {"content": "SCORE: 0.5"}}],
                "usage": {"prompt_tokens": 30, "completion_tokens": 2},
            }
        )
    )
    terms: list[TermSpec] = [
        MatchTerm(name="correct", kind="match", mode="final-number", weight=1.0),
        RegexTerm(name="format", kind="regex", pattern=r"#### \d+$", weight=0.2),
        JudgeTerm(
            name="style",
            kind="judge",
            endpoint=server.url,
            model="m",
            instructions="grade",
            weight=-0.4,
        ),
    ]
    batch_in = [rollout("x\n#### 42"), rollout("#### 41"), rollout("no number")]
    with RewardScorer(terms, max_concurrency=4) as scorer:
        assert scorer.weights == {"correct": 1.0, "format": 0.2, "style": -0.4}
        batch = scorer.score(batch_in)
    assert batch.scores == pytest.approx([1.0, 0.0, -0.2])
    first = batch.rollouts[0]
    assert first.values == {"correct": 1.0, "format": 1.0, "style": 0.5}
    assert first.shares == pytest.approx({"correct": 1.0, "format": 0.2, "style": -0.2})
    assert math.isclose(sum(first.shares.values()), first.score)
    assert set(first.seconds) == {"correct", "format", "style"}
    assert {k: len(v) for k, v in batch.stats.seconds.items()} == {
        "correct": 3,
        "format": 3,
        "style": 3,
    }
    assert batch.stats.judge_prompt_tokens == {"style": 90}
    assert batch.stats.judge_completion_tokens == {"style": 6}
    assert batch.stats.failures == {}
    assert batch.stats.wall_seconds > 0


def test_rollouts_score_concurrently_up_to_the_limit(serve: Serve) -> None:
    count, concurrency = 24, 6
    # The server answers only once `concurrency` requests are in together: a scorer that
    # sent fewer at once would leave them waiting (and broken after 30 s).
    together = threading.Barrier(concurrency, timeout=30)

    def respond(path: str, body: Any) -> Reply:
        together.wait()
        return Reply({"score": 1.0})

    server = serve(respond)
    with RewardScorer([http_term(server.url)], max_concurrency=concurrency) as scorer:
        batch = scorer.score([rollout() for _ in range(count)])
    assert batch.scores == [1.0] * count
    assert server.max_in_flight == concurrency  # that many at once, never more


def test_the_batch_time_limit_ends_what_is_still_running(serve: Serve) -> None:
    # The server would answer after a minute, within the term's own limit: the batch's ends
    # the calls first.
    server = serve(lambda path, body: Reply({"score": 1.0}, delay=60.0))
    terms: list[TermSpec] = [
        http_term(server.url, timeout=90.0),
        RegexTerm(name="f", kind="regex", pattern="4"),
    ]
    with RewardScorer(terms, batch_timeout_seconds=0.5) as scorer:
        batch = scorer.score([rollout(), rollout()])
    assert [r.failures for r in batch.rollouts] == [{"eval": "timeout"}] * 2
    assert "batch's time limit of 0.5 s" in batch.rollouts[0].explanations["eval"]
    assert [r.values["f"] for r in batch.rollouts] == [1.0, 1.0]  # the fast term still counts
    assert batch.stats.failures == {("eval", "timeout"): 2}


def test_a_rule_slower_than_the_thread_limit_fails_with_timeout(tmp_path: Path) -> None:
    # The rule waits for a file lock the test holds while it scores: it is stuck, and the
    # scorer goes on without it after its 0.2 s (the lock then lets its thread end).
    lock_path = tmp_path / "held"
    source = tmp_path / "src"
    source.mkdir()
    (source / "slow.py").write_text(
        "import fcntl\n\n"
        "def score(**kw):\n"
        f"    with open({str(lock_path)!r}) as f:\n"
        "        fcntl.flock(f, fcntl.LOCK_EX)\n"
        "    return 1.0\n"
    )
    packed = pack_bundle(source, 1 << 16)
    directory = unpack_bundle(packed.data, packed.sha256, tmp_path / "b")
    term = RuleTerm(name="slow", kind="rule", bundle="p/b:v1", function="slow:score")
    with open(lock_path, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with RewardScorer(
            [term], bundle_resolver=lambda ref: directory, sync_timeout_seconds=0.2
        ) as scorer:
            batch = scorer.score([rollout()])
    assert batch.rollouts[0].failures == {"slow": "timeout"}
    assert "longer than 0.2 s" in batch.rollouts[0].explanations["slow"]


def test_a_grader_that_breaks_fails_its_term_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: RegexGrader, rollout: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(RegexGrader, "evaluate", broken)
    terms: list[TermSpec] = [
        RegexTerm(name="f", kind="regex", pattern="x"),
        MatchTerm(name="m", kind="match", mode="contains"),
    ]
    with RewardScorer(terms) as scorer:
        batch = scorer.score([rollout("42", "42")])
    assert batch.rollouts[0].values == {"f": 0.0, "m": 1.0}
    assert batch.rollouts[0].failures == {"f": "error"}
    assert batch.rollouts[0].explanations == {"f": "RuntimeError: boom"}


def test_score_works_from_inside_a_running_event_loop() -> None:
    with RewardScorer([MatchTerm(name="m", kind="match", mode="exact")]) as scorer:

        async def caller() -> list[float]:
            return scorer.score([rollout("a", "a"), rollout("a", "b")]).scores

        assert asyncio.run(caller()) == [1.0, 0.0]
        assert asyncio.run(scorer.score_async([rollout("a", "a")])).scores == [1.0]


def test_an_empty_batch_scores_nothing() -> None:
    with RewardScorer([MatchTerm(name="m", kind="match")]) as scorer:
        batch = scorer.score([])
    assert batch.rollouts == [] and batch.stats.seconds == {"m": []}


def test_the_scorer_is_built_from_the_plan_reward() -> None:
    reward = Reward(
        terms=[MatchTerm(name="m", kind="match"), RegexTerm(name="r", kind="regex", pattern="x")],
        max_concurrency=3,
    )
    with RewardScorer.from_reward(reward) as scorer:
        assert scorer.max_concurrency == 3
        assert [g.name for g in scorer.graders] == ["m", "r"]


def test_duplicate_term_names_are_refused() -> None:
    terms: list[TermSpec] = [
        MatchTerm(name="m", kind="match"),
        RegexTerm(name="m", kind="regex", pattern="x"),
    ]
    with pytest.raises(RewardSetupError, match="'m' appear more than once"):
        RewardScorer(terms)
