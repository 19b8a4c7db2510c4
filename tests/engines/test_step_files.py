"""The background writer of step files: every step kept, in order, off the training loop;
a step that could not be kept fails the run with the step named."""

from __future__ import annotations

import errno
import threading

import pytest

from akka_training.core.failures import FailureReason
from akka_training.engines.failures import JobError, classify_failure
from akka_training.engines.step_files import StepFileWriter


def test_submit_returns_before_the_step_is_kept_and_wait_returns_after_every_step() -> None:
    release = threading.Event()
    kept: list[tuple[int, str]] = []

    def keep(step: int, item: str) -> None:
        release.wait()
        kept.append((step, item))

    writer = StepFileWriter(keep, depth=4)
    for step in (1, 2, 3):
        writer.submit(step, f"rollouts of {step}")
    assert kept == []  # the loop went on while the first step is still being written
    release.set()
    writer.wait()
    assert kept == [(1, "rollouts of 1"), (2, "rollouts of 2"), (3, "rollouts of 3")]
    writer.close()


def test_close_keeps_what_is_pending() -> None:
    kept: list[int] = []
    writer = StepFileWriter[None](lambda step, _: kept.append(step))
    for step in range(1, 6):
        writer.submit(step, None)
    writer.close()
    assert kept == [1, 2, 3, 4, 5]
    with pytest.raises(RuntimeError, match="the step file writer is closed"):
        writer.submit(6, None)


def test_a_step_that_could_not_be_kept_fails_the_run_naming_the_step() -> None:
    kept: list[int] = []

    def keep(step: int, _: None) -> None:
        if step == 2:
            raise ValueError("the disk is read-only")
        kept.append(step)

    writer = StepFileWriter[None](keep)
    for step in (1, 2, 3):
        writer.submit(step, None)
    with pytest.raises(JobError) as failed:
        writer.wait()
    assert str(failed.value) == "the rollouts of step 2 could not be kept: the disk is read-only"
    assert classify_failure(failed.value, None)[0] == FailureReason.TRAINING_ERROR
    assert kept == [1]  # nothing is kept after the failure: the run is failing
    with pytest.raises(JobError, match="the rollouts of step 2 could not be kept"):
        writer.submit(4, None)  # the next step's hand-over raises it too
    writer.close()


def test_a_full_disk_keeps_its_own_failure_reason() -> None:
    def keep(step: int, _: None) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "step-1.parquet")

    writer = StepFileWriter[None](keep)
    writer.submit(1, None)
    with pytest.raises(OSError) as failed:
        writer.wait()
    assert classify_failure(failed.value, None)[0] == FailureReason.STORAGE_FULL
    writer.close()
