"""What a phase module decides from: a frozen view of a run, its attempt and claim, and what the
cluster said about the job. No rows, no clients: deciding needs no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from akka_training.backends.base import JobStatus
from akka_training.core.failures import FailureReason
from akka_training.core.phases import RuleName


@dataclass(frozen=True)
class AttemptView:
    number: int
    state: str  # pending, launched, exited
    handle: dict[str, Any] | None
    launch_tries: int
    next_try_at: datetime | None
    outcome: str | None  # finished, stopped, failed (reported by the job)
    stop_sent: bool
    heartbeat_at: datetime | None


@dataclass(frozen=True)
class RunView:
    id: str
    phase: str
    requested: str | None
    attempt: AttemptView | None
    claim_state: str | None  # QUEUED, GRANTED, or None when the run holds no open claim
    claim_created_at: datetime | None
    last_step_at: datetime | None
    stalled: bool
    # How many of the run's latest attempts in a row died without a report (and were retried).
    crashes: int = 0
    claim_devices: int = 0  # the devices the open claim asks for
    pool: str = ""
    # An interactive run (`core.interactive`): its job held the client's model, so a job that
    # dies fails the run rather than start again from a snapshot.
    interactive: bool = False


@dataclass(frozen=True)
class Probe:
    """What the cluster said about the job this pass. `status` is None when it was not asked
    or did not answer."""

    status: JobStatus | None = None
    log_tail: str = ""
    # Since when the cluster has not answered `observe` (None: it answers).
    cluster_unreachable_since: datetime | None = None
    # The most devices one node of the run's pool offered at the last look (None: unknown, or
    # a pool of one host; 0: no node of the pool answers).
    largest_node: int | None = None


@dataclass(frozen=True)
class Limits:
    start_retries: int
    retry_base_seconds: float
    stall_seconds: float
    unreachable_seconds: float
    stop_grace_seconds: float
    # How long a job that reported its end may take to exit before it is stopped.
    exit_grace_seconds: float = 30.0
    # How often in a row a job that dies without a report is run again from its last snapshot.
    job_retries: int = 3


@dataclass
class Decision:
    """What to do for one run this pass; empty means nothing."""

    rule: RuleName | None = None
    reason: FailureReason | None = None
    detail: str | None = None
    new_attempt: bool = False
    launch: bool = False
    stop_job: bool = False
    attempt_exited: bool = False
    release_claim: bool = False
    stalled: bool | None = None
    # The attempt died without a report and is run again (with REQUEUE): it ends as crashed,
    # not lost, and counts towards `Limits.job_retries`.
    retry: bool = False
    # A line for the run's events (why it runs again).
    note: str | None = None
    # Seconds the new attempt waits before its launch (back-off after deaths in a row).
    launch_delay: float | None = None

    def __bool__(self) -> bool:
        return bool(
            self.rule
            or self.new_attempt
            or self.launch
            or self.stop_job
            or self.attempt_exited
            or self.release_claim
            or self.stalled is not None
        )
