"""A preference evaluation's plan: the metric parses with its default name, and it does not mix
with metrics that read generated answers."""

from __future__ import annotations

import pytest

from akka_training.core.errors import PlanRefused
from akka_training.core.evaluations import PreferenceMetric, parse_evaluation

PLAN = {
    "kind": "evaluation",
    "project": "maths",
    "baseModel": "tiny-chat",
    "dataset": "maths/pairs",
    "metrics": [{"kind": "preference"}],
}


def test_a_preference_metric_parses_with_its_default_name() -> None:
    plan = parse_evaluation(PLAN)
    assert plan.metrics == [PreferenceMetric(kind="preference", name="preference")]


def test_a_preference_metric_does_not_mix_with_generated_answers() -> None:
    mixed = {**PLAN, "metrics": [{"kind": "preference"}, {"name": "correct", "kind": "match"}]}
    with pytest.raises(PlanRefused) as refused:
        parse_evaluation(mixed)
    assert [(p.field, p.message) for p in refused.value.all_problems] == [
        (
            "metrics",
            "A preference metric scores the pairs of a preference dataset, which the other "
            "metrics cannot read; evaluate them in a separate evaluation.",
        )
    ]
