"""From exceptions to failure reasons."""

from __future__ import annotations

from akka_training.core.failures import FailureReason
from akka_training.engines.failures import (
    DataError,
    DeviceOutOfMemory,
    JobCrashed,
    classify_failure,
    out_of_memory,
)


def test_device_and_host_memory_are_told_apart() -> None:
    import torch

    device = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    host = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory"
    )

    assert classify_failure(device, None)[0] is FailureReason.DEVICE_OOM
    assert classify_failure(host, None)[0] is FailureReason.HOST_OOM
    assert classify_failure(MemoryError(), None)[0] is FailureReason.HOST_OOM


def test_a_wrapped_out_of_memory_error_is_still_found() -> None:
    import torch

    try:
        try:
            raise torch.OutOfMemoryError("CUDA out of memory")
        except torch.OutOfMemoryError as exc:
            raise RuntimeError("step failed") from exc
    except RuntimeError as outer:
        reason, detail = classify_failure(outer, None)

    assert reason is FailureReason.DEVICE_OOM
    assert detail.startswith("device memory ran out: OutOfMemoryError: CUDA out of memory")


def test_known_errors_keep_their_reason_and_others_carry_their_traceback() -> None:
    assert classify_failure(DataError("row 3 is broken"), None) == (
        FailureReason.DATA_ERROR,
        "row 3 is broken",
    )
    try:
        raise ValueError("something odd")
    except ValueError as exc:
        reason, detail = classify_failure(exc, None)
    assert reason is FailureReason.TRAINING_ERROR
    assert detail.splitlines()[-1] == "ValueError: something odd"
    assert "Traceback" in detail


def test_a_job_error_is_reported_as_it_is() -> None:
    # verl's engine read this from verl's log: its tail is the detail, not a summary of it.
    tail = "step 3\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB"

    assert classify_failure(DeviceOutOfMemory(tail), None) == (FailureReason.DEVICE_OOM, tail)
    assert classify_failure(JobCrashed(""), None) == (FailureReason.JOB_CRASHED, "")


def test_out_of_memory_is_found_in_what_an_exception_wraps() -> None:
    import torch

    try:
        try:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
        except RuntimeError as exc:
            raise ValueError("the batch could not be scored") from exc
    except ValueError as outer:
        wrapped = outer

    assert out_of_memory(wrapped) == "host"
    assert out_of_memory(torch.OutOfMemoryError("CUDA out of memory")) == "device"
    assert out_of_memory(ValueError("the batch could not be scored")) is None


def test_a_write_to_a_full_device_is_storage_full_also_when_wrapped() -> None:
    """A real ENOSPC from the OS: /dev/full answers every write with it."""
    import os

    from akka_training.engines.failures import classify_failure as classify

    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        try:
            try:
                os.write(fd, b"x")
            except OSError as exc:
                raise RuntimeError("saving the checkpoint failed") from exc
        except RuntimeError as wrapped:
            reason, detail = classify(wrapped, None)
    finally:
        os.close(fd)
    assert reason == FailureReason.STORAGE_FULL
    assert detail.startswith("no space left on the device: [Errno 28]")
    assert FailureReason.STORAGE_FULL.sentence.startswith(
        "the storage this run writes to is full (no space left on the device)"
    )


def test_torch_s_own_out_of_memory_error_is_device_memory_whatever_it_says() -> None:
    import torch

    error = torch.OutOfMemoryError("allocation failed")

    assert classify_failure(error, None)[0] is FailureReason.DEVICE_OOM
    assert out_of_memory(error) == "device"
