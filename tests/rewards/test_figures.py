"""The RL step figures, checked against values computed by hand."""

from __future__ import annotations

import math

import pytest

from akka_training.rewards.figures import histogram_values, step_figures
from akka_training.rewards.rollouts import Rollout

WEIGHTS = {"correct": 1.0, "format": 0.5, "long": -0.25}


def make(
    index: int,
    group: int,
    correct: float,
    fmt: float,
    long: float,
    tokens: int,
    finish: str = "stop",
    tool_calls: int = 0,
    tool_failures: int = 0,
) -> Rollout:
    shares = {"correct": correct * 1.0, "format": fmt * 0.5, "long": long * -0.25}
    return Rollout(
        step=1,
        index=index,
        group=group,
        prompt="p",
        completion="c",
        expected="e",
        score=sum(shares.values()),
        shares=shares,
        values={"correct": correct, "format": fmt, "long": long},
        completion_tokens=tokens,
        finish_reason=finish,
        tool_calls=tool_calls,
        tool_failures=tool_failures,
        weights=dict(WEIGHTS),
    )


# Two prompts x 3 generations. Scores: 1.5, 1.5, 1.5 (group 0: no spread), 0, 0.75, -0.25.
ROLLOUTS = [
    make(0, 0, 1, 1, 0, 10),
    make(1, 0, 1, 1, 0, 20),
    make(2, 0, 1, 1, 0, 30),
    make(3, 1, 0, 0, 0, 40),
    make(4, 1, 0.5, 0.5, 0, 50),
    make(5, 1, 0, 0, 1, 64, finish="length"),
]


def test_step_figures_match_hand_computed_values() -> None:
    figures = step_figures(ROLLOUTS, generations_per_prompt=3, max_completion_tokens=64)
    scores = [1.5, 1.5, 1.5, 0.0, 0.75, -0.25]
    mean = sum(scores) / 6  # 5/6
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / 6)  # population
    expected = {
        "reward/mean": mean,
        "reward/std": std,
        "reward/min": -0.25,
        "reward/max": 1.5,
        "terms/correct/share_mean": 3.5 / 6,
        "terms/correct/share_std": math.sqrt(
            sum((x - 3.5 / 6) ** 2 for x in [1, 1, 1, 0, 0.5, 0]) / 6
        ),
        "terms/format/share_mean": 1.75 / 6,
        "terms/format/share_std": math.sqrt(
            sum((x - 1.75 / 6) ** 2 for x in [0.5, 0.5, 0.5, 0, 0.25, 0]) / 6
        ),
        "terms/long/share_mean": -0.25 / 6,
        "terms/long/share_std": math.sqrt((5 * (0.25 / 6) ** 2 + (-0.25 + 0.25 / 6) ** 2) / 6),
        "completions/min_length": 10.0,
        "completions/max_length": 64.0,
        "completions/mean_length": 214 / 6,
        "completions/mean_terminated_length": 150 / 5,
        "completions/clipped_ratio": 1 / 6,
        "groups/frac_zero_std": 0.5,
        "rollouts/frac_zero": 1 / 6,
        "rollouts/frac_full": 3 / 6,  # total positive weight 1.5
    }
    assert figures.keys() == expected.keys()
    for name, value in expected.items():
        assert figures[name] == pytest.approx(value), name


def test_terminated_length_is_omitted_when_every_completion_was_cut() -> None:
    cut = [make(i, 0, 0, 0, 0, 64, finish="length") for i in range(2)]
    figures = step_figures(cut, generations_per_prompt=2, max_completion_tokens=64)
    assert "completions/mean_terminated_length" not in figures
    assert figures["completions/clipped_ratio"] == 1.0
    assert figures["groups/frac_zero_std"] == 1.0
    assert figures["rollouts/frac_zero"] == 1.0


def test_a_completion_at_the_maximum_counts_as_clipped_whatever_its_finish_reason() -> None:
    rollouts = [make(0, 0, 1, 1, 0, 64), make(1, 0, 1, 1, 0, 63)]
    figures = step_figures(rollouts, generations_per_prompt=2, max_completion_tokens=64)
    assert figures["completions/clipped_ratio"] == 0.5


def test_tool_figures_appear_only_with_tool_calls() -> None:
    assert not any(k.startswith("tools/") for k in step_figures(ROLLOUTS, 3, 64))
    rollouts = [
        make(0, 0, 1, 1, 0, 10, tool_calls=3, tool_failures=1),
        make(1, 0, 1, 1, 0, 10, tool_calls=1),
        make(2, 1, 1, 1, 0, 10),
        make(3, 1, 1, 1, 0, 10),
    ]
    figures = step_figures(rollouts, generations_per_prompt=2, max_completion_tokens=64)
    assert figures["tools/calls_per_completion"] == 1.0
    assert figures["tools/failure_share"] == 0.25


def test_an_empty_step_has_no_figures() -> None:
    assert step_figures([], 4, 64) == {}


def test_groups_larger_than_the_generations_per_prompt_are_refused() -> None:
    with pytest.raises(ValueError, match="more than generationsPerPrompt=2"):
        step_figures(ROLLOUTS, generations_per_prompt=2, max_completion_tokens=64)


def test_histogram_values_hold_each_rollout() -> None:
    values = histogram_values(ROLLOUTS)
    assert values["reward"] == [1.5, 1.5, 1.5, 0.0, 0.75, -0.25]
    assert values["reward/correct"] == [1.0, 1.0, 1.0, 0.0, 0.5, 0.0]
    assert values["reward/long"] == [-0.0, -0.0, -0.0, -0.0, -0.0, -0.25]
    assert values["completion_length"] == [10.0, 20.0, 30.0, 40.0, 50.0, 64.0]
    assert list(values) == [
        "reward",
        "reward/correct",
        "reward/format",
        "reward/long",
        "completion_length",
    ]
