"""The cluster backend interface.

A backend launches, observes and stops jobs, and reports the devices it observes. It never
decides admission: the trainer grants claims and launches a job only when its devices are free.
Every method may block for a network round trip; none is called inside a database transaction.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Literal


class ClusterUnreachable(Exception):
    """The cluster did not answer. Transient: the caller retries with back-off."""


class LaunchRefused(Exception):
    """The cluster answered but would not start the job (bad environment, refused submission).
    The caller retries a few times, then fails the run."""


@dataclass(frozen=True)
class LaunchRequest:
    # The run (or the task, `core.tasks`) the job belongs to, and which try of it this is: the
    # same pair always names the same job.
    run_id: str
    attempt: int
    pool: str
    devices: int
    # Device indices granted on the node (local backend: GPU indices; empty on CPU).
    device_ids: list[int]
    job_spec: dict[str, Any]  # a JobSpec as JSON
    env: dict[str, str]  # secrets and endpoints for the job (its token among them)
    host_memory_bytes: int | None = None
    # Replaces the engine entry point (tests use the scripted job).
    entry_module: str = "akka_training.engines.job"


@dataclass(frozen=True)
class JobStatus:
    state: Literal["running", "exited", "missing"]
    exit_code: int | None = None
    signal: int | None = None
    detail: str | None = None
    # The kernel's out-of-memory killer acted in the job's cgroup while it ran (where the
    # backend can tell): a SIGKILL is an out-of-memory kill only then.
    oom_killed: bool = False


@dataclass(frozen=True)
class ObservedPool:
    devices: int
    device_ids: list[str] = field(default_factory=list)
    accelerator: str | None = None
    # The most devices one node of the pool offers (a run's devices are on one node); None
    # where the pool is one host.
    largest_node: int | None = None


class Backend(abc.ABC):
    name: str

    @abc.abstractmethod
    def launch(self, request: LaunchRequest) -> dict[str, Any]:
        """Start the job; return a JSON handle that `status`, `stop` and `logs` accept after a
        service restart. Raises `LaunchRefused` or `ClusterUnreachable`. Idempotent for the same
        run and attempt: a second call returns the first job's handle."""

    @abc.abstractmethod
    def status(self, handle: dict[str, Any]) -> JobStatus:
        """Whether the job runs. ``missing``: the cluster does not know it (lost). Raises
        `ClusterUnreachable`."""

    @abc.abstractmethod
    def stop(self, handle: dict[str, Any], grace_seconds: float) -> None:
        """Ask the job to stop (SIGTERM or the cluster's equivalent), then kill it after the grace
        period. Returns without waiting for the kill. Idempotent."""

    @abc.abstractmethod
    def logs(self, handle: dict[str, Any], offset: int = 0) -> tuple[str, int]:
        """The job's output from byte `offset` (a negative offset counts from the end), and the
        offset to continue from."""

    @abc.abstractmethod
    def observe(self) -> dict[str, ObservedPool]:
        """The devices each pool's nodes offer now, by pool name. Raises `ClusterUnreachable`."""

    def sees_path(self, path: str) -> bool | None:
        """Whether the cluster's jobs can read `path` (a base model's directory): True or False
        when this service can tell (the cluster is this host), None when it cannot (the job
        finds out). Answers without a network call."""
        return None

    def close(self) -> None:
        """Release clients. Jobs keep running."""
