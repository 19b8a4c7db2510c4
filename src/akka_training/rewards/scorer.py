"""Scoring a generation batch: every rollout by every term, concurrently, never stuck.

`RewardScorer.score` runs each (rollout, term) pair as one task on an asyncio loop, at most
`max_concurrency` at once: remote terms (judge, http) are awaited on the loop with one shared
HTTP client; rule terms run in a thread pool. Cheap terms (regex, length, match but for its math
mode) run over the whole batch in one worker call each, as a thread hand-off per rollout would
cost more than the term. Limits, so that nothing blocks forever:

- a remote term enforces its own ``timeoutSeconds``, its whole budget for one rollout, tries
  again after a 429 or 5xx inside it (`terms.remote`), and scores 0 only once it is spent;
- a thread-pool term gets `sync_timeout_seconds` (a Python thread cannot be stopped, so a rule
  stuck past it keeps its thread; the batch goes on without it);
- the whole batch gets `batch_timeout_seconds`; pairs unfinished by then fail with ``timeout``.

A term's failure scores 0 for that term and is counted; `score` never raises because of one.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.core.plans import Reward
from akka_training.rewards.inputs import FailureCause, RolloutInput, TermFailed, TermOutcome
from akka_training.rewards.scoring import ScoredBatch, ScoredRollout, ScoreStats
from akka_training.rewards.terms import (
    AsyncGrader,
    BundleResolver,
    Grader,
    SyncGrader,
    TermSpec,
    build_graders,
)

# The most threads for CPU-bound terms, whatever max_concurrency says: more only adds GIL
# contention.
MAX_THREADS = 32


class RewardScorer:
    """Scores batches of rollouts with the plan's reward terms. Build once per job, call
    `score` once per generation batch (from any thread), `close` at the end."""

    def __init__(
        self,
        terms: Sequence[TermSpec],
        *,
        bundle_resolver: BundleResolver | None = None,
        max_concurrency: int = 16,
        sync_timeout_seconds: float = 30.0,
        batch_timeout_seconds: float = 600.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """Raises `RewardSetupError` when a term cannot run (see `terms.build_graders`).
        `clock`: the time the remote terms' budgets and waits between tries count."""
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.graders: list[Grader] = build_graders(
            terms, bundle_resolver=bundle_resolver, clock=clock
        )
        self.max_concurrency = max_concurrency
        self.sync_timeout_seconds = sync_timeout_seconds
        self.batch_timeout_seconds = batch_timeout_seconds
        self._threads = ThreadPoolExecutor(
            max_workers=min(max_concurrency, MAX_THREADS), thread_name_prefix="reward-term"
        )
        # Loading the CA certificates takes tens of milliseconds: once per scorer, not per batch.
        self._ssl: ssl.SSLContext | None = None
        if any(isinstance(g, AsyncGrader) for g in self.graders):
            self._ssl = ssl.create_default_context()

    @classmethod
    def from_reward(
        cls, reward: Reward, *, bundle_resolver: BundleResolver | None = None
    ) -> RewardScorer:
        """A scorer for the plan's ``config.reward``."""
        return cls(
            reward.terms,
            bundle_resolver=bundle_resolver,
            max_concurrency=reward.max_concurrency,
        )

    @property
    def weights(self) -> dict[str, float]:
        """Each term's weight, by name, in the plan's order."""
        return {g.name: g.weight for g in self.graders}

    def score(self, batch: Sequence[RolloutInput]) -> ScoredBatch:
        """Score `batch`. Callable from plain code and from inside a running event loop (the
        scoring loop then runs in a private thread)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.score_async(batch))
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward-loop") as private:
            return private.submit(asyncio.run, self.score_async(batch)).result()

    async def score_async(self, batch: Sequence[RolloutInput]) -> ScoredBatch:
        """Score `batch` on the caller's event loop."""
        started = time.perf_counter()
        gate = asyncio.Semaphore(self.max_concurrency)
        limits = httpx.Limits(
            max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency
        )
        results: dict[tuple[int, str], _Result] = {}
        began: dict[tuple[int, str], float] = {}
        batched = [g for g in self.graders if isinstance(g, SyncGrader) and g.batched]
        single = [g for g in self.graders if g not in batched]
        remote = any(isinstance(g, AsyncGrader) for g in single)
        async with _client(limits, remote, self._ssl) as client:
            tasks = {
                asyncio.ensure_future(
                    self._one(i, grader, rollout, client, gate, began, results)
                ): (i, grader.name)
                for i, rollout in enumerate(batch)
                for grader in single
            }
            if batched:
                await asyncio.gather(
                    *(self._whole_batch(g, batch, began, results) for g in batched)
                )
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=self.batch_timeout_seconds)
                for task in pending:
                    task.cancel()
                if pending:
                    await asyncio.wait(pending)
                now = time.perf_counter()
                for task in pending:
                    key = tasks[task]
                    results[key] = _Result.failed(
                        TermFailed(
                            FailureCause.TIMEOUT,
                            f"the batch's time limit of {self.batch_timeout_seconds:g} s ran out",
                        ),
                        now - began.get(key, now),
                    )
        return self._assemble(len(batch), results, time.perf_counter() - started)

    async def _whole_batch(
        self,
        grader: SyncGrader,
        batch: Sequence[RolloutInput],
        began: dict[tuple[int, str], float],
        results: dict[tuple[int, str], _Result],
    ) -> None:
        """Evaluate a batched grader over the whole batch in one worker call; rollouts it has
        not reached when `sync_timeout_seconds` runs out fail with ``timeout``."""

        def work() -> None:
            for i, rollout in enumerate(batch):
                key = (i, grader.name)
                start = began[key] = time.perf_counter()
                try:
                    outcome = grader.evaluate(rollout)
                    if not math.isfinite(outcome.value):
                        raise TermFailed(FailureCause.ERROR, f"the term's value is {outcome.value}")
                    results[key] = _Result(outcome, None, time.perf_counter() - start)
                except TermFailed as failure:
                    results[key] = _Result.failed(failure, time.perf_counter() - start)
                except Exception as exc:
                    broken = TermFailed(FailureCause.ERROR, f"{type(exc).__name__}: {exc}")
                    results[key] = _Result.failed(broken, time.perf_counter() - start)

        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.run_in_executor(self._threads, work), self.sync_timeout_seconds
            )
        except TimeoutError:
            now = time.perf_counter()
            for i in range(len(batch)):
                key = (i, grader.name)
                if key not in results:
                    results[key] = _Result.failed(
                        TermFailed(
                            FailureCause.TIMEOUT,
                            f"the term took longer than {self.sync_timeout_seconds:g} s",
                        ),
                        now - began.get(key, now),
                    )

    def close(self) -> None:
        """Release the graders' workers and the thread pool (without waiting for a stuck
        term)."""
        for grader in self.graders:
            grader.close()
        self._threads.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _one(
        self,
        index: int,
        grader: Grader,
        rollout: RolloutInput,
        client: httpx.AsyncClient | None,
        gate: asyncio.Semaphore,
        began: dict[tuple[int, str], float],
        results: dict[tuple[int, str], _Result],
    ) -> None:
        key = (index, grader.name)
        async with gate:
            start = began[key] = time.perf_counter()
            try:
                outcome = await self._evaluate(grader, rollout, client)
                if not math.isfinite(outcome.value):
                    raise TermFailed(FailureCause.ERROR, f"the term's value is {outcome.value}")
                result = _Result(outcome, None, time.perf_counter() - start)
            except TermFailed as failure:
                result = _Result.failed(failure, time.perf_counter() - start)
            except Exception as exc:  # a grader's bug is that term's failure, not the batch's
                broken = TermFailed(FailureCause.ERROR, f"{type(exc).__name__}: {exc}")
                result = _Result.failed(broken, time.perf_counter() - start)
            results[key] = result

    async def _evaluate(
        self, grader: Grader, rollout: RolloutInput, client: httpx.AsyncClient | None
    ) -> TermOutcome:
        if isinstance(grader, SyncGrader):
            loop = asyncio.get_running_loop()
            work = loop.run_in_executor(self._threads, grader.evaluate, rollout)
            try:
                return await asyncio.wait_for(work, self.sync_timeout_seconds)
            except TimeoutError:
                raise TermFailed(
                    FailureCause.TIMEOUT,
                    f"the term took longer than {self.sync_timeout_seconds:g} s",
                ) from None
        assert isinstance(grader, AsyncGrader) and client is not None
        return await grader.evaluate(rollout, client)

    def _assemble(
        self, count: int, results: dict[tuple[int, str], _Result], wall: float
    ) -> ScoredBatch:
        names = [g.name for g in self.graders]
        judges = [g.name for g in self.graders if g.kind == "judge"]
        remote = [g.name for g in self.graders if isinstance(g, AsyncGrader)]
        stats = ScoreStats(
            seconds={n: [] for n in names},
            failures={},
            judge_prompt_tokens=dict.fromkeys(judges, 0),
            judge_completion_tokens=dict.fromkeys(judges, 0),
            wall_seconds=wall,
            retries=dict.fromkeys(remote, 0),
        )
        failures: Counter[tuple[str, str]] = Counter()
        scored = []
        for i in range(count):
            rollout = ScoredRollout(score=0.0, shares={}, values={}, seconds={})
            for grader in self.graders:
                result = results.get((i, grader.name)) or _Result.failed(
                    TermFailed(FailureCause.ERROR, "the term's evaluation ended without a result"),
                    0.0,
                )
                share = grader.weight * result.outcome.value + 0.0  # no -0.0 in records
                rollout.values[grader.name] = result.outcome.value
                rollout.shares[grader.name] = share
                rollout.seconds[grader.name] = result.seconds
                stats.seconds[grader.name].append(result.seconds)
                if result.cause is not None:
                    rollout.failures[grader.name] = result.cause.value
                    failures[(grader.name, result.cause.value)] += 1
                if result.outcome.explanation:
                    rollout.explanations[grader.name] = result.outcome.explanation
                if result.outcome.retries:
                    rollout.retries[grader.name] = result.outcome.retries
                    stats.retries[grader.name] = (
                        stats.retries.get(grader.name, 0) + result.outcome.retries
                    )
                if grader.name in stats.judge_prompt_tokens:
                    stats.judge_prompt_tokens[grader.name] += result.outcome.prompt_tokens
                    stats.judge_completion_tokens[grader.name] += result.outcome.completion_tokens
            rollout.score = sum(rollout.shares.values()) + 0.0
            scored.append(rollout)
        stats.failures = dict(failures)
        return ScoredBatch(scored, stats)


@dataclass(frozen=True)
class _Result:
    outcome: TermOutcome
    cause: FailureCause | None
    seconds: float

    @classmethod
    def failed(cls, failure: TermFailed, seconds: float) -> _Result:
        outcome = TermOutcome(
            0.0, failure.detail, failure.prompt_tokens, failure.completion_tokens, failure.retries
        )
        return cls(outcome, failure.cause, seconds)


@contextlib.asynccontextmanager
async def _client(
    limits: httpx.Limits, needed: bool, context: ssl.SSLContext | None
) -> AsyncIterator[httpx.AsyncClient | None]:
    """The batch's HTTP client for remote terms; none when the batch has no remote term."""
    if not needed:
        yield None
        return
    async with httpx.AsyncClient(limits=limits, verify=context or True) as client:
        yield client
