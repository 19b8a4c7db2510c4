"""The length term, as a bonus and as a penalty."""

from __future__ import annotations

import pytest

from akka_training.core.plans import LengthTerm
from akka_training.rewards.scorer import RewardScorer

from ..servers import rollout


@pytest.mark.parametrize(
    ("tokens", "value"),
    [(0, 0.0), (60, 0.0), (80, 0.5), (100, 1.0), (150, 1.0), (200, 1.0), (210, 0.75), (240, 0.0)],
)
def test_length_is_one_inside_the_range_and_falls_linearly_over_the_slack(
    tokens: int, value: float
) -> None:
    term = LengthTerm(
        name="len", kind="length", min_tokens=100, max_tokens=200, slack_tokens=40, weight=-0.5
    )
    with RewardScorer([term]) as scorer:
        result = scorer.score([rollout(tokens=tokens)]).rollouts[0]
    assert result.values["len"] == pytest.approx(value)
    assert result.shares["len"] == pytest.approx(-0.5 * value)  # the weight carries the sign


def test_length_without_maximum_has_no_upper_bound() -> None:
    term = LengthTerm(name="len", kind="length", min_tokens=10)
    with RewardScorer([term]) as scorer:
        result = scorer.score([rollout(tokens=100_000)]).rollouts[0]
    assert result.values["len"] == 1.0
