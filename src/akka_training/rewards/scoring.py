"""What the scorer returns: plain dataclasses the engines, the rollout store and the
telemetry layer read. Term names key every mapping; causes are `FailureCause` values."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ScoredRollout:
    """One rollout's reward.

    `score` is the sum of `shares`; a term's share is its weight times its value. A term that
    failed has value 0, its cause in `failures` and what happened in `explanations`."""

    score: float
    shares: dict[str, float]
    values: dict[str, float]
    # Seconds each term took to score this rollout (from its start, not from the batch's).
    seconds: dict[str, float]
    failures: dict[str, str] = field(default_factory=dict)
    explanations: dict[str, str] = field(default_factory=dict)
    # Tries a remote term made again (after a 429 or 5xx) for this rollout; only terms that did.
    retries: dict[str, int] = field(default_factory=dict)


@dataclass
class ScoreStats:
    """Accounting for one batch, for the telemetry layer."""

    # Per term, the seconds it took on each rollout, in batch order.
    seconds: dict[str, list[float]]
    # Failures counted by (term, cause).
    failures: dict[tuple[str, str], int]
    # Tokens each judge term's model read and wrote for this batch (judge terms only, 0 kept).
    judge_prompt_tokens: dict[str, int]
    judge_completion_tokens: dict[str, int]
    # Wall-clock time of the whole batch.
    wall_seconds: float
    # Tries each remote term (judge, http) made again after a 429 or 5xx (0 kept).
    retries: dict[str, int] = field(default_factory=dict)


@dataclass
class ScoredBatch:
    rollouts: list[ScoredRollout]
    stats: ScoreStats

    @property
    def scores(self) -> list[float]:
        return [r.score for r in self.rollouts]
