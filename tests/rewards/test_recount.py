"""`rewards.recount`, the second implementation `runs verify` counts with, gives every figure the
engines publish from rollouts (`rewards.figures`, `rewards.health`) the same value, history
monitors included; and a changed rollout changes the figures it should."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from akka_training.core.plans import Monitors
from akka_training.rewards.figures import step_figures
from akka_training.rewards.health import HealthWatch, rollout_health
from akka_training.rewards.recount import History, StepFile, prompt_tokens, recount
from akka_training.rewards.rollouts import Rollout, step_file_bytes

WEIGHTS = {"format": 0.5, "correct": 1.0, "judge": 0.25}


def a_step(step: int, seed: int) -> list[Rollout]:
    rng = random.Random(seed)
    rollouts = []
    for index in range(8):
        values = {name: float(rng.choice([0, 1])) for name in WEIGHTS}
        shares = {name: WEIGHTS[name] * v for name, v in values.items()}
        rollouts.append(
            Rollout(
                step=step,
                index=index,
                group=index // 4,
                prompt=[{"role": "user", "content": f"What is {index // 4} + 1?"}],
                completion=rng.choice(["#### 1", "#### 2", "so\n#### 2", "\\boxed{2}"]),
                expected="#### 2",
                score=sum(shares.values()),
                shares=shares,
                values=values,
                completion_tokens=rng.randint(1, 8),
                finish_reason=rng.choice(["stop", "length"]),
                failures={"judge": "timeout"} if rng.random() < 0.3 else {},
                weights=dict(WEIGHTS),
            )
        )
    return rollouts


def test_the_recount_gives_every_published_figure_the_same_value() -> None:
    watch = HealthWatch(run="r", monitors=Monitors(baseline_steps=2), correctness="correct")
    history = History(baseline_steps=2, correctness="correct")
    for step in range(1, 6):
        rollouts = a_step(step, seed=step)
        published = step_figures(rollouts, 4, 8) | rollout_health(rollouts, ["judge"])
        published |= watch.observe(step, published)[0]
        counted = recount(StepFile.read(step_file_bytes(rollouts)), 8, ["judge"])
        counted |= history.add(counted)
        assert sorted(counted) == sorted(published), step
        for name, value in published.items():
            assert counted[name] == pytest.approx(value, rel=1e-12, abs=1e-12), (step, name)
    assert "health/hacking_gap" in counted


def test_a_changed_rollout_changes_the_figures_it_should() -> None:
    rollouts = a_step(1, seed=7)
    before = recount(StepFile.read(step_file_bytes(rollouts)), 8)
    longer = [replace(rollouts[0], completion_tokens=rollouts[0].completion_tokens + 8)]
    after = recount(StepFile.read(step_file_bytes(longer + rollouts[1:])), 8)
    changed = {n for n in before if not math.isclose(before[n], after[n])}
    assert "completions/mean_length" in changed and "reward/mean" not in changed


def test_tokens_count_each_rollouts_prompt_and_completion() -> None:
    rollouts = a_step(1, seed=3)
    step = StepFile.read(step_file_bytes(rollouts))
    completions = sum(r.completion_tokens for r in rollouts)
    assert prompt_tokens(step, lambda prompt: 10) == 8 * 10 + completions
