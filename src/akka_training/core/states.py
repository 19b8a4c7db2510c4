"""The states of the rows beside a run, by name: a claim on a pool's devices, an attempt of the
run's job, what a user asked of a running run, and how an attempt ended. The values are what
the database stores and the API shows.

A run's own phases and the rules that move it are in `phases`.
"""

from __future__ import annotations

from enum import StrEnum


class ClaimState(StrEnum):
    """Devices asked for (QUEUED), held (GRANTED), or given back (RELEASED)."""

    QUEUED = "QUEUED"
    GRANTED = "GRANTED"
    RELEASED = "RELEASED"


# The claims that count against a pool and a quota.
OPEN_CLAIM_STATES: tuple[ClaimState, ...] = (ClaimState.QUEUED, ClaimState.GRANTED)


class AttemptState(StrEnum):
    """PENDING: not launched yet; LAUNCHED: the backend took it; EXITED: gone, for whatever
    reason (`AttemptOutcome` says which)."""

    PENDING = "pending"
    LAUNCHED = "launched"
    EXITED = "exited"


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
