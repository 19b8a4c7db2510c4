"""The `length` term as the docs state it: a bonus inside the range with a positive weight, a
penalty outside it with a negative weight."""

from __future__ import annotations

import pytest

from akka_training.core.plans import LengthTerm
from akka_training.rewards.inputs import RolloutInput
from akka_training.rewards.terms.length import LengthGrader


def share(weight: float, tokens: int) -> float:
    spec = LengthTerm.model_validate(
        {
            "name": "len",
            "kind": "length",
            "weight": weight,
            "minTokens": 10,
            "maxTokens": 20,
            "slackTokens": 10,
        }
    )
    grader = LengthGrader(spec)
    outcome = grader.evaluate(rollout(tokens))
    return weight * outcome.value


def rollout(tokens: int) -> RolloutInput:
    return RolloutInput(
        prompt="Say something.", completion="x " * tokens, expected=None, completion_tokens=tokens
    )


@pytest.mark.parametrize(
    ("tokens", "bonus", "penalty"),
    [
        (15, 1.0, 0.0),
        (10, 1.0, 0.0),
        (20, 1.0, 0.0),
        (5, 0.5, -0.5),
        (25, 0.5, -0.5),
        (0, 0.0, -1.0),
        (40, 0.0, -1.0),
    ],
)
def test_a_positive_weight_pays_inside_the_range_and_a_negative_one_charges_outside(
    tokens: int, bonus: float, penalty: float
) -> None:
    assert share(1.0, tokens) == pytest.approx(bonus)
    assert share(-1.0, tokens) == pytest.approx(penalty)
