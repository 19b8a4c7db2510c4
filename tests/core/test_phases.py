import pytest

from akka_training.core.errors import Conflict
from akka_training.core.failures import FailureReason, failure_text
from akka_training.core.phases import (
    TERMINAL,
    IllegalTransition,
    Phase,
    RuleName,
    may_request,
    transition,
)
from akka_training.core.states import Request


def test_rules_move_runs_along_the_lifecycle() -> None:
    phase = Phase.QUEUED
    for rule in ("admit", "start-training", "request-pause", "paused", "resume", "admit"):
        phase = transition(phase, RuleName(rule))
    assert phase == Phase.PREPARING
    assert transition(Phase.TRAINING, RuleName.COMPLETE) == Phase.COMPLETED


def test_a_terminal_run_never_moves() -> None:
    for phase in TERMINAL:
        for rule in ("admit", "resume", "cancel", "fail", "complete", "requeue"):
            with pytest.raises(IllegalTransition):
                transition(phase, RuleName(rule))


def test_a_move_no_rule_allows_is_a_conflict_naming_the_run_and_its_phase() -> None:
    with pytest.raises(IllegalTransition) as refused:
        transition(Phase.COMPLETED, RuleName.REQUEST_PAUSE, "Run r-1")
    assert isinstance(refused.value, Conflict) and refused.value.status == 409
    assert refused.value.message == (
        "Run r-1 is COMPLETED; the rule 'request-pause' moves a run from PREPARING, QUEUED, "
        "TRAINING only."
    )
    with pytest.raises(IllegalTransition) as unnamed:
        transition(Phase.PAUSED, RuleName.COMPLETE)
    assert unnamed.value.message == (
        "A run is PAUSED; the rule 'complete' moves a run from PAUSING, PREPARING, TRAINING only."
    )


def test_a_request_takes_the_place_of_a_weaker_one_only() -> None:
    for wanted in Request:
        assert may_request(None, wanted)
    assert may_request(Request.PAUSE_SAVE, Request.CANCEL)
    assert may_request(Request.PAUSE_LATEST, Request.CANCEL)
    # A pause never undoes a cancel, and the first pause asked is the one done.
    assert not may_request(Request.CANCEL, Request.pause("save"))
    assert not may_request(Request.CANCEL, Request.pause("latest"))
    assert not may_request(Request.PAUSE_SAVE, Request.PAUSE_LATEST)
    assert not any(may_request(pending, pending) for pending in Request)


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
