import pytest

from akka_training.core.failures import FailureReason, failure_text
from akka_training.core.phases import TERMINAL, IllegalTransition, Phase, transition


def test_rules_move_runs_along_the_lifecycle() -> None:
    phase = Phase.QUEUED
    for rule in ("admit", "start-training", "request-pause", "paused", "resume", "admit"):
        phase = transition(phase, rule)
    assert phase == Phase.PREPARING
    assert transition(Phase.TRAINING, "complete") == Phase.COMPLETED


def test_a_terminal_run_never_moves() -> None:
    for phase in TERMINAL:
        for rule in ("admit", "resume", "cancel", "fail", "complete", "requeue"):
            with pytest.raises(IllegalTransition):
                transition(phase, rule)


def test_failure_sentences_of_the_release_notes() -> None:
    assert failure_text(FailureReason.JOB_START_FAILED) == (
        "this run's job could not be started on the training cluster"
    )
    assert failure_text(FailureReason.CLUSTER_UNREACHABLE) == (
        "the training cluster could not be reached while this run waited for its devices"
    )
    assert "device memory" in FailureReason.DEVICE_OOM.sentence
    assert "host memory" in FailureReason.HOST_OOM.sentence
    assert failure_text(FailureReason.JOB_CRASHED, "boom").endswith("\nboom")
