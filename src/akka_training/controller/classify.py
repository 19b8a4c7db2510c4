"""Why a job ended without reporting it: out of device memory, out of host memory (or killed by
the OOM killer), or a crash with its last log lines."""

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
    if status.signal == signal.SIGKILL:
        # Nobody asked this job to stop: on Linux that is the out-of-memory killer.
        return (
            FailureReason.HOST_OOM,
            "the job was killed (SIGKILL) without being asked to stop: the out-of-memory limit "
            "of its node (the kernel's out-of-memory killer, or its container's memory limit) "
            "stopped it.\n" + tail,
        )
    if status.exit_code == 0:
        return FailureReason.JOB_CRASHED, "the job exited without reporting its end.\n" + tail
    how = f"signal {status.signal}" if status.signal else f"exit code {status.exit_code}"
    return FailureReason.JOB_CRASHED, f"the job ended with {how}.\n{tail}"


def _last_lines(text: str, n: int) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-n:])
