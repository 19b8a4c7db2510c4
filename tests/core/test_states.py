"""The named rules of the rows beside runs: claims, attempts, tasks and pipelines move only
forward along them, and an ended one never moves again (a pipeline excepted: it resumes)."""

from __future__ import annotations

import pytest

from akka_training.core.rules import IllegalTransition
from akka_training.core.states import (
    ATTEMPT_RULES,
    CLAIM_RULES,
    PIPELINE_RULES,
    TASK_RULES,
    TERMINAL_TASK_STATES,
    AttemptRule,
    AttemptState,
    ClaimRule,
    ClaimState,
    PipelineRule,
    PipelineState,
    TaskRule,
    TaskState,
)


def test_a_claim_is_granted_once_and_released_once() -> None:
    assert CLAIM_RULES.target(ClaimState.QUEUED, ClaimRule.GRANT) == ClaimState.GRANTED
    for state in (ClaimState.QUEUED, ClaimState.GRANTED):
        assert CLAIM_RULES.target(state, ClaimRule.RELEASE) == ClaimState.RELEASED
    for state, rule in [
        (ClaimState.GRANTED, ClaimRule.GRANT),
        (ClaimState.RELEASED, ClaimRule.GRANT),
        (ClaimState.RELEASED, ClaimRule.RELEASE),
    ]:
        assert not CLAIM_RULES.can(state, rule)
    with pytest.raises(IllegalTransition) as refused:
        CLAIM_RULES.target(ClaimState.RELEASED, ClaimRule.GRANT, "Claim 7")
    assert refused.value.message == (
        "Claim 7 is RELEASED; the rule 'grant' moves a claim from QUEUED only."
    )


def test_an_attempt_launches_once_and_exits_once() -> None:
    assert ATTEMPT_RULES.target(AttemptState.PENDING, AttemptRule.LAUNCH) == AttemptState.LAUNCHED
    for state in (AttemptState.PENDING, AttemptState.LAUNCHED):
        assert ATTEMPT_RULES.target(state, AttemptRule.EXIT) == AttemptState.EXITED
    assert not ATTEMPT_RULES.can(AttemptState.LAUNCHED, AttemptRule.LAUNCH)
    assert not ATTEMPT_RULES.can(AttemptState.EXITED, AttemptRule.LAUNCH)
    assert not ATTEMPT_RULES.can(AttemptState.EXITED, AttemptRule.EXIT)


def test_a_task_ends_once_from_pending_or_running() -> None:
    assert TASK_RULES.target(TaskState.PENDING, TaskRule.LAUNCH) == TaskState.RUNNING
    assert not TASK_RULES.can(TaskState.RUNNING, TaskRule.LAUNCH)
    ends = {TaskRule.SUCCEED: "SUCCEEDED", TaskRule.FAIL: "FAILED", TaskRule.CANCEL: "CANCELLED"}
    for rule, target in ends.items():
        # Its job may report before its launch is recorded: the end rules take a PENDING task.
        for state in (TaskState.PENDING, TaskState.RUNNING):
            assert TASK_RULES.target(state, rule) == target
        for ended in TERMINAL_TASK_STATES:
            assert not TASK_RULES.can(ended, rule)
            assert not TASK_RULES.can(ended, TaskRule.LAUNCH)


def test_a_pipeline_ends_from_running_and_resumes_from_a_failure_or_a_cancel() -> None:
    ends = {
        PipelineRule.COMPLETE: PipelineState.COMPLETED,
        PipelineRule.FAIL: PipelineState.FAILED,
        PipelineRule.CANCEL: PipelineState.CANCELLED,
    }
    for rule, target in ends.items():
        assert PIPELINE_RULES.target(PipelineState.RUNNING, rule) == target
        for ended in ends.values():
            assert not PIPELINE_RULES.can(ended, rule)
    for state in (PipelineState.FAILED, PipelineState.CANCELLED):
        assert PIPELINE_RULES.target(state, PipelineRule.RESUME) == PipelineState.RUNNING
    for state in (PipelineState.RUNNING, PipelineState.COMPLETED):
        assert not PIPELINE_RULES.can(state, PipelineRule.RESUME)
