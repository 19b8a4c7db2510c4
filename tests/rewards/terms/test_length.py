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
    bonus = LengthTerm(
        name="len", kind="length", min_tokens=100, max_tokens=200, slack_tokens=40, weight=0.5
    )
    with RewardScorer([bonus]) as scorer:
        result = scorer.score([rollout(tokens=tokens)]).rollouts[0]
    assert result.values["len"] == pytest.approx(value)
    assert result.shares["len"] == pytest.approx(0.5 * value)


@pytest.mark.parametrize(
    ("tokens", "value"),
    [(0, 1.0), (60, 1.0), (80, 0.5), (100, 0.0), (150, 0.0), (200, 0.0), (210, 0.25), (240, 1.0)],
)
def test_a_negative_weight_penalises_length_outside_the_range(tokens: int, value: float) -> None:
    # As the docs say: a completion of the right length loses nothing, one far outside the
    # range loses the whole weight.
    penalty = LengthTerm(
        name="len", kind="length", min_tokens=100, max_tokens=200, slack_tokens=40, weight=-0.5
    )
    with RewardScorer([penalty]) as scorer:
        result = scorer.score([rollout(tokens=tokens)]).rollouts[0]
    assert result.values["len"] == pytest.approx(value)
    assert result.shares["len"] == pytest.approx(-0.5 * value)


def test_length_without_maximum_has_no_upper_bound() -> None:
    term = LengthTerm(name="len", kind="length", min_tokens=10)
    with RewardScorer([term]) as scorer:
        result = scorer.score([rollout(tokens=100_000)]).rollouts[0]
    assert result.values["len"] == 1.0
