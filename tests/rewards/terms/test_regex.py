"""The regex term."""

from __future__ import annotations

import pytest

from akka_training.core.plans import RegexTerm
from akka_training.rewards.inputs import RewardSetupError
from akka_training.rewards.scorer import RewardScorer

from ..servers import rollout


def values(pattern: str, completions: list[str]) -> list[float]:
    with RewardScorer([RegexTerm(name="fmt", kind="regex", pattern=pattern)]) as scorer:
        batch = scorer.score([rollout(c) for c in completions])
    return [r.values["fmt"] for r in batch.rollouts]


def test_regex_searches_each_line() -> None:
    assert values(r"^#### -?[0-9]+$", ["reasoning\n#### 42\n", "#### 42 apples", "no"]) == [
        1.0,
        0.0,
        0.0,
    ]


def test_regex_matches_anywhere_not_only_at_the_start() -> None:
    assert values(r"\bPASS\b", ["tests: PASS", "tests: PASSED"]) == [1.0, 0.0]


def test_a_pattern_that_does_not_compile_is_refused_when_the_scorer_is_built() -> None:
    with pytest.raises(RewardSetupError, match=r"'fmt'.*not a valid Python regular expression"):
        RewardScorer([RegexTerm(name="fmt", kind="regex", pattern="(unclosed")])
