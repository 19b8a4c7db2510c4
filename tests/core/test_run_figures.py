"""A run's figures as its row keeps them (`core.run_figures`) and a step's figures as a job
reports them (`core.figures`): the JSON rows already hold reads back unchanged, and each report
changes them as `runs get` shows."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from akka_training.core.figures import Figures
from akka_training.core.reports import JobSummary, MonitorPause
from akka_training.core.run_figures import RunFigures

# `runs.summary` as rows written before the model hold it (a grpo run with tools, paused once).
STORED: dict[str, Any] = {
    "reward": 0.75,
    "firstReward": 0.25,
    "tokensPerSecond": 500.0,
    "mfu": 0.25,
    "paddingShare": 0.2,
    "totals": {
        "tokens": 1000.0,
        "seconds": 2.0,
        "flopSeconds": 0.5,
        "mfuSeconds": 2.0,
        "realTokens": 1000.0,
        "slots": 1250.0,
    },
    "health": {"step": 3, "figures": {"groups/frac_zero_std": 0.5, "health/length_drift": 1.5}},
    "monitorPause": {
        "monitor": "zero-spread",
        "figure": "groups/frac_zero_std",
        "value": 0.9,
        "threshold": 0.8,
        "step": 3,
        "reason": "most prompt groups score all their completions the same",
    },
    "toolCalls": {"search": 4},
    "toolFailures": {"search": 1},
    "toolTimeouts": {"search": 0},
}


def test_a_stored_summary_reads_back_as_it_was_written() -> None:
    figures = RunFigures.model_validate(STORED)
    assert figures.reward == 0.75 and figures.totals.slots == 1250.0
    assert figures.health is not None and figures.health.step == 3
    assert figures.monitor_pause is not None and figures.monitor_pause.monitor == "zero-spread"
    assert figures.to_json() == STORED
    # An early row, before the sums were kept, and a key another version wrote.
    early = RunFigures.model_validate({"loss": 1.5, "evalLoss": 1.75, "later": [1]})
    assert early.totals.tokens == 0.0 and early.tokens_per_second is None
    zero = {"tokens": 0.0, "seconds": 0.0, "flopSeconds": 0.0, "mfuSeconds": 0.0}
    zero |= {"realTokens": 0.0, "slots": 0.0}
    assert early.to_json() == {"loss": 1.5, "evalLoss": 1.75, "totals": zero, "later": [1]}


def test_a_step_updates_the_latest_figures_and_the_sums_of_the_steps_kept() -> None:
    first = Figures.of({"reward/mean": 0.25, "tokens": 600.0, "timing/step": 1.0, "mfu": 0.2})
    second = Figures.of(
        {"reward/mean": 0.75, "tokens": 400.0, "timing/step": 1.0, "padding_share": 0.2}
    )
    run = RunFigures().with_step(1, first, "grpo").with_step(2, second, "grpo")
    assert (run.reward, run.first_reward) == (0.75, 0.25)
    assert run.tokens_per_second == 500.0
    assert run.mfu == pytest.approx(0.2)
    assert run.padding_share == pytest.approx(0.2)
    assert run.loss is None  # a reinforcement run's loss is not the training loss
    # Step 2 trained again by a later attempt: the first report of it stops counting.
    again = Figures.of({"reward/mean": 0.5, "tokens": 1400.0, "timing/step": 1.0})
    retrained = run.with_step(2, again, "grpo", replaced=second)
    assert retrained.totals.tokens == 2000.0 and retrained.tokens_per_second == 1000.0
    assert retrained.padding_share is None and retrained.first_reward == 0.25


def test_an_sft_step_keeps_its_loss_and_the_health_figures_of_the_latest_step() -> None:
    run = RunFigures().with_step(
        4, Figures.of({"loss": 1.25, "eval_loss": 1.5, "health/length_drift": 2.0}), "sft"
    )
    assert (run.loss, run.eval_loss) == (1.25, 1.5)
    assert run.health is not None and run.health.figures == {"health/length_drift": 2.0}
    assert run.with_step(5, Figures.of({"loss": 1.0}), "sft").health == run.health


def test_the_jobs_closing_figures_replace_the_latest_steps_and_keep_the_rest() -> None:
    run = RunFigures.model_validate(STORED)
    ended = run.with_end(JobSummary(reward=0.8, tool_calls={"search": 5}))
    assert (ended.reward, ended.tool_calls, ended.tool_failures) == (
        0.8,
        {"search": 5},
        {"search": 1},
    )
    assert ended.totals == run.totals and run.reward == 0.75
    pause = MonitorPause.model_validate(STORED["monitorPause"])
    assert RunFigures().with_pause(pause).monitor_pause == pause


def test_the_figures_are_changed_by_a_new_value_only() -> None:
    # The column sees an assignment, not a change inside the value: so none can be made.
    figures: Any = RunFigures()  # the assignment the type checker refuses, tried at run time
    with pytest.raises(ValidationError):
        figures.loss = 1.0


def test_a_steps_figures_read_by_family() -> None:
    reported = {
        "loss": 1.0,
        "memory/reserved": 2.0e9,
        "memory/weights": 1.0e9,
        "terms/correct/share_mean": 0.5,
        "terms/correct/value_mean": 0.5,
        "groups/frac_zero_std": 0.25,
        "health/distinct_answers/step": 3.0,
        "timing/update": 0.5,
    }
    figures = Figures.of(reported)
    assert figures.loss == 1.0 and figures.update_seconds == 0.5 and figures.reward_mean is None
    assert figures.memory() == {"reserved": 2.0e9, "weights": 1.0e9}
    assert figures.term_shares() == {"correct": 0.5}
    assert figures.health() == {"groups/frac_zero_std": 0.25, "health/distinct_answers/step": 3.0}
    assert figures.named() == reported
