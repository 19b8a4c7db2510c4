"""How `runs wait` shows a step: its loss or its reward with each term's share, and the ETA."""

from __future__ import annotations

from akka_training.api.runs import RunProgressLine
from akka_training.cli.watching import step_text


def test_a_supervised_step_shows_its_loss_and_the_time_left() -> None:
    line = RunProgressLine.model_validate(
        {
            "type": "progress",
            "phase": "TRAINING",
            "step": 12,
            "totalSteps": 30,
            "loss": 1.23456,
            "etaSeconds": 40.2,
        }
    )
    assert step_text(line) == "step 12 of 30  loss 1.235  ETA 40s"


def test_a_reinforcement_step_shows_its_reward_and_each_terms_share() -> None:
    line = RunProgressLine.model_validate(
        {
            "type": "progress",
            "phase": "TRAINING",
            "step": 30,
            "totalSteps": 30,
            "reward": 0.4125,
            "terms": {"correct": 0.25, "format": 0.1625},
            "etaSeconds": 0.0,
        }
    )
    # The last step has no time left to show.
    assert step_text(line) == "step 30 of 30  reward 0.412 (correct 0.25, format 0.163)"


def test_a_step_whose_loss_is_nan_says_so() -> None:
    line = RunProgressLine.model_validate(
        {"type": "progress", "phase": "TRAINING", "step": 2, "totalSteps": 4, "loss": "NaN"}
    )
    assert step_text(line).startswith("step 2 of 4  loss NaN")
