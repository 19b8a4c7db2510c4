"""The states of the rows beside a run, by name, and the named rules that move each: a claim on
a pool's devices, an attempt of the run's job, a task, a pipeline; what a user asked of a
running run, and how an attempt ended. The values are what the database stores and the API
shows; `storage.transitions` applies the rules to the rows as stored (`core.rules`).

A run's own phases and the rules that move it are in `phases`. A pipeline's stage has no state
of its own: it is its run's phase, or its evaluation's task state (WAITING before either,
NOT_STARTED when the pipeline ended before it).
"""

from __future__ import annotations

from enum import StrEnum

from akka_training.core.rules import Rules, rule


class ClaimState(StrEnum):
    """Devices asked for (QUEUED), held (GRANTED), or given back (RELEASED)."""

    QUEUED = "QUEUED"
    GRANTED = "GRANTED"
    RELEASED = "RELEASED"


# The claims that count against a pool and a quota.
OPEN_CLAIM_STATES: tuple[ClaimState, ...] = (ClaimState.QUEUED, ClaimState.GRANTED)


class ClaimRule(StrEnum):
    GRANT = "grant"  # the scheduler gave it devices
    RELEASE = "release"  # the devices go back (or the wait ends) once the job is gone


CLAIM_RULES: Rules[ClaimState, ClaimRule] = Rules(
    "claim",
    ClaimState,
    (
        rule(ClaimRule.GRANT, {ClaimState.QUEUED}, ClaimState.GRANTED),
        rule(ClaimRule.RELEASE, OPEN_CLAIM_STATES, ClaimState.RELEASED),
    ),
)


class AttemptState(StrEnum):
    """PENDING: not launched yet; LAUNCHED: the backend took it; EXITED: gone, for whatever
    reason (`AttemptOutcome` says which)."""

    PENDING = "pending"
    LAUNCHED = "launched"
    EXITED = "exited"


class AttemptRule(StrEnum):
    LAUNCH = "launch"  # the backend took the job
    EXIT = "exit"  # the job is gone (or never started), for whatever reason


ATTEMPT_RULES: Rules[AttemptState, AttemptRule] = Rules(
    "attempt",
    AttemptState,
    (
        rule(AttemptRule.LAUNCH, {AttemptState.PENDING}, AttemptState.LAUNCHED),
        rule(AttemptRule.EXIT, {AttemptState.PENDING, AttemptState.LAUNCHED}, AttemptState.EXITED),
    ),
)


class AttemptOutcome(StrEnum):
    """How an attempt ended: reported by its job (finished, stopped, failed) or decided by the
    controller (lost by the cluster, crashed without a report, never started)."""

    FINISHED = "finished"
    STOPPED = "stopped"
    FAILED = "failed"
    LOST = "lost"
    CRASHED = "crashed"
    NOT_STARTED = "not-started"


class Request(StrEnum):
    """What a user asked of an open run that the controller has not finished doing."""

    CANCEL = "cancel"
    PAUSE_SAVE = "pause-save"  # snapshot at the end of the step in progress, then stop
    PAUSE_LATEST = "pause-latest"  # stop now; resume from the last committed snapshot

    @classmethod
    def pause(cls, checkpoint: str) -> Request:
        """The pause request for ``--checkpoint save|latest``."""
        return cls(f"pause-{checkpoint}")


class TaskState(StrEnum):
    """A task (a job on the cluster that is not a training run: a merge, an evaluation, ...).

    PENDING: not launched yet (or waiting to retry a launch); RUNNING: the backend took its
    job; SUCCEEDED (its result is stored), FAILED (`failure` says why), CANCELLED."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_TASK_STATES: tuple[TaskState, ...] = (
    TaskState.SUCCEEDED,
    TaskState.FAILED,
    TaskState.CANCELLED,
)


class TaskRule(StrEnum):
    LAUNCH = "launch"  # the backend took its job
    SUCCEED = "succeed"  # its job reported the result
    FAIL = "fail"  # its job reported a failure, died without a report, or never started
    CANCEL = "cancel"  # a user's cancel, once its job is gone (or before it ran)
    RELAUNCH = "relaunch"  # a long-lived task's job (an endpoint's) died: it starts again


# A task's job may report its end before the controller has recorded its launch: the end
# rules move a PENDING task too.
_OPEN_TASK = {TaskState.PENDING, TaskState.RUNNING}

TASK_RULES: Rules[TaskState, TaskRule] = Rules(
    "task",
    TaskState,
    (
        rule(TaskRule.LAUNCH, {TaskState.PENDING}, TaskState.RUNNING),
        rule(TaskRule.SUCCEED, _OPEN_TASK, TaskState.SUCCEEDED),
        rule(TaskRule.FAIL, _OPEN_TASK, TaskState.FAILED),
        rule(TaskRule.CANCEL, _OPEN_TASK, TaskState.CANCELLED),
        rule(TaskRule.RELAUNCH, {TaskState.RUNNING}, TaskState.PENDING),
    ),
)


class PipelineState(StrEnum):
    """RUNNING: its stages start one after the other; COMPLETED (every stage did), FAILED (a
    stage failed, could not start or its gate did not pass: `failure` says which), CANCELLED."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class PipelineRule(StrEnum):
    COMPLETE = "complete"
    FAIL = "fail"
    CANCEL = "cancel"
    RESUME = "resume"  # a failed or cancelled pipeline runs again from its unfinished stage


PIPELINE_RULES: Rules[PipelineState, PipelineRule] = Rules(
    "pipeline",
    PipelineState,
    (
        rule(PipelineRule.COMPLETE, {PipelineState.RUNNING}, PipelineState.COMPLETED),
        rule(PipelineRule.FAIL, {PipelineState.RUNNING}, PipelineState.FAILED),
        rule(PipelineRule.CANCEL, {PipelineState.RUNNING}, PipelineState.CANCELLED),
        rule(
            PipelineRule.RESUME,
            {PipelineState.FAILED, PipelineState.CANCELLED},
            PipelineState.RUNNING,
        ),
    ),
)
