"""Why a job ended without reporting it: out of device memory, out of host memory (its own
allocation failed under its memory limit, or the kernel's out-of-memory killer ended it), killed
by someone else, or a crash with its last log lines.

A SIGKILL is an out-of-memory kill only where the kernel says so (the backend read the job's
cgroup's ``oom_kill`` count rise while it ran); otherwise it is a kill.

Memory exhaustion fails the run at once (running it again would run out again: the settings
have to change); every other death without a report may be retried (`job_state.ended`)."""

from __future__ import annotations

import signal

from akka_training.backends.base import JobStatus
from akka_training.core.exits import memory_exhausted
from akka_training.core.failures import FailureReason


def classify_exit(status: JobStatus, log_tail: str) -> tuple[FailureReason, str]:
    tail = _last_lines(log_tail, 15)
    memory = memory_exhausted(log_tail)
    if memory == "device":
        return FailureReason.DEVICE_OOM, tail
    if memory == "host":
        return FailureReason.HOST_OOM, tail
    if status.signal == signal.SIGKILL and status.oom_killed:
        return (
            FailureReason.HOST_OOM,
            "the kernel's out-of-memory killer ended the job (SIGKILL; its cgroup's oom_kill "
            "count rose while it ran).\n" + tail,
        )
    if status.signal == signal.SIGKILL:
        why = status.detail or "the job's process was killed"
        return (
            FailureReason.JOB_KILLED,
            f"{why} (SIGKILL) without being asked to stop; the kernel recorded no "
            f"out-of-memory kill for it.\n{tail}",
        )
    if status.exit_code == 0:
        return FailureReason.JOB_CRASHED, "the job exited without reporting its end.\n" + tail
    how = (
        f"signal {_signal_name(status.signal)}"
        if status.signal
        else f"exit code {status.exit_code}"
    )
    return FailureReason.JOB_CRASHED, f"the job ended with {how}.\n{tail}"


def _last_lines(text: str, n: int) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-n:])


def retryable(reason: FailureReason) -> bool:
    """Whether a job that died of `reason` without a report is worth another attempt: not when
    it ran out of memory (it would again, under the same settings)."""
    return reason in (FailureReason.JOB_CRASHED, FailureReason.JOB_KILLED)


def _signal_name(number: int) -> str:
    try:
        return f"{number} ({signal.Signals(number).name})"
    except ValueError:
        return str(number)
