"""The health figures and monitors, checked against values computed by hand."""

from __future__ import annotations

import pytest

from akka_training.core.monitors import BY_NAME, crossed
from akka_training.core.plans import Monitors, MonitorThresholds, Reward
from akka_training.rewards.health import (
    HealthWatch,
    correctness_term,
    percentile,
    remote_terms,
    rollout_health,
)
from akka_training.rewards.rollouts import Rollout


def make(
    index: int, group: int, completion: str, failures: dict[str, str] | None = None
) -> Rollout:
    return Rollout(
        step=1,
        index=index,
        group=group,
        prompt="p",
        completion=completion,
        expected=None,
        score=0.0,
        shares={},
        values={},
        completion_tokens=len(completion),
        finish_reason="stop",
        failures=failures or {},
    )


# Group 0: three completions, two distinct, one final answer ("8"). Group 1: three completions,
# all distinct, final answers 8, 8, 9.
ROLLOUTS = [
    make(0, 0, "so #### 8"),
    make(1, 0, "so #### 8"),
    make(2, 0, "then #### 8"),
    make(3, 1, "a #### 8", {"judge": "http-status"}),
    make(4, 1, "b #### 8"),
    make(5, 1, "c #### 9", {"judge": "timeout", "other": "timeout"}),
]


def test_distinct_completions_and_answers_per_group_and_step() -> None:
    figures = rollout_health(ROLLOUTS)
    assert figures["health/distinct_completions/group"] == pytest.approx((2 / 3 + 3 / 3) / 2)
    assert figures["health/distinct_completions/step"] == pytest.approx(5 / 6)
    assert figures["health/distinct_answers/group"] == pytest.approx((1 / 3 + 2 / 3) / 2)
    assert figures["health/distinct_answers/step"] == pytest.approx(2 / 6)
    assert not any(k.startswith("health/term_") for k in figures)


def test_remote_term_failures_and_latency() -> None:
    seconds = {"judge": [0.1, 0.2, 0.3, 0.4, 0.5, 2.0], "grader": [0.1] * 6}
    figures = rollout_health(ROLLOUTS, ["judge", "grader"], seconds)
    assert figures["health/term_failures/judge"] == pytest.approx(2 / 6)
    assert figures["health/term_failures/grader"] == 0.0
    assert figures["health/judge_failures"] == pytest.approx(2 / 6)
    # Nearest rank: ceil(0.95 x 6) = 6th of the sorted values.
    assert figures["health/term_latency_p95/judge"] == 2.0
    assert figures["health/judge_latency_p95"] == 2.0
    # Only the remote terms named: "other" failed too, but it is not a judge or http term.
    assert "health/term_failures/other" not in figures


def test_percentile_is_the_nearest_rank() -> None:
    assert percentile(list(range(1, 101)), 0.95) == 95
    assert percentile([3.0], 0.95) == 3.0


def test_remote_and_correctness_terms_come_from_the_reward() -> None:
    reward = Reward.model_validate(
        {
            "terms": [
                {"name": "fmt", "kind": "regex", "pattern": "x"},
                {
                    "name": "j",
                    "kind": "judge",
                    "endpoint": "http://127.0.0.1:1",
                    "model": "m",
                    "instructions": "i",
                },
                {"name": "h", "kind": "http", "url": "http://127.0.0.1:1"},
                {"name": "right", "kind": "match"},
            ]
        }
    )
    assert remote_terms(reward) == ["j", "h"]
    assert correctness_term(None, reward) == "right"
    assert correctness_term(Monitors(correctness_term="fmt"), reward) == "fmt"


def test_length_drift_against_the_first_steps() -> None:
    watch = HealthWatch("run-1", Monitors(baseline_steps=2))
    assert watch.observe(1, {"completions/mean_length": 10.0})[0] == {}
    assert watch.observe(2, {"completions/mean_length": 20.0})[0] == {}
    figures, _ = watch.observe(3, {"completions/mean_length": 45.0})
    assert figures["health/length_drift"] == pytest.approx(45 / 15)


def test_reward_hacking_gap_is_reward_rise_minus_the_terms() -> None:
    watch = HealthWatch("run-1", Monitors(baseline_steps=2), correctness="right")
    steps = [(0.1, 0.1), (0.3, 0.1), (0.9, 0.1), (1.3, 0.2)]
    out: dict[str, float] = {}
    for step, (reward, share) in enumerate(steps, 1):
        out, _ = watch.observe(step, {"reward/mean": reward, "terms/right/share_mean": share})
    # Latest two steps against the first two.
    rise = (0.9 + 1.3) / 2 - (0.1 + 0.3) / 2
    term_rise = (0.1 + 0.2) / 2 - (0.1 + 0.1) / 2
    assert out["health/reward_rise"] == pytest.approx(rise)
    assert out["health/term_rise"] == pytest.approx(term_rise)
    assert out["health/hacking_gap"] == pytest.approx(rise - term_rise)


def test_a_monitor_pauses_after_k_consecutive_steps_with_the_reason() -> None:
    monitors = Monitors(pause_on=["answer-collapse"], consecutive_steps=2)
    watch = HealthWatch("run-7", monitors)
    collapsed = {"health/distinct_answers/step": 0.125}
    healthy = {"health/distinct_answers/step": 0.9}
    assert watch.observe(1, collapsed)[1] is None
    assert watch.observe(2, healthy)[1] is None  # the streak starts again
    assert watch.observe(3, collapsed)[1] is None
    pause = watch.observe(4, collapsed)[1]
    assert pause is not None
    assert (pause.monitor, pause.figure, pause.step) == (
        "answer-collapse",
        "health/distinct_answers/step",
        4,
    )
    assert pause.value == 0.125 and pause.threshold == 0.2
    assert pause.reason == (
        "The answer-collapse monitor paused the run at step 4: health/distinct_answers/step "
        "was 0.125 (at or below 0.2) for 2 steps in a row (the step's completions end in few "
        "distinct final answers). Inspect the rollouts with `akka training runs rollouts "
        "run-7 --step 4`, then `akka training runs resume run-7`, or branch from the snapshot "
        "with other settings."
    )
    # Once paused, it does not ask again.
    assert watch.observe(5, collapsed)[1] is None


def test_a_monitor_not_in_pause_on_never_pauses() -> None:
    watch = HealthWatch("r", Monitors(consecutive_steps=1))
    for step in range(1, 5):
        assert watch.observe(step, {"groups/frac_zero_std": 1.0})[1] is None


def test_thresholds_come_from_the_plan() -> None:
    monitors = Monitors(
        pause_on=["judge-failures"],
        consecutive_steps=1,
        thresholds=MonitorThresholds(judge_failures=0.5),
    )
    watch = HealthWatch("r", monitors)
    assert watch.observe(1, {"health/judge_failures": 0.4})[1] is None
    pause = watch.observe(2, {"health/judge_failures": 0.5})[1]
    assert pause is not None and pause.monitor == "judge-failures"
    assert "for step (" not in pause.reason and "for 1 step" not in pause.reason


@pytest.mark.parametrize(
    ("name", "value", "limit", "past"),
    [
        ("answer-collapse", 0.2, 0.2, True),
        ("answer-collapse", 0.21, 0.2, False),
        ("zero-spread", 0.9, 0.9, True),
        ("zero-spread", 0.5, 0.9, False),
        ("length-drift", 2.0, 2.0, True),
        ("length-drift", 0.5, 2.0, True),
        ("length-drift", 0.6, 2.0, False),
        ("entropy-collapse", 0.01, 0.05, True),
        ("reward-hacking", 0.1, 0.2, False),
    ],
)
def test_each_direction(name: str, value: float, limit: float, past: bool) -> None:
    assert crossed(BY_NAME[name], value, limit) is past
