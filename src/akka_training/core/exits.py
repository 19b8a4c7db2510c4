"""Which memory ran out, read from what a job or its engine printed: the one set of markers
that the controller (a job that died without reporting), the TRL engine (an exception in the
job) and the verl engine (verl's log) all use.

`memory_exhausted(text)` answers ``"device"``, ``"host"`` or None. Device markers are checked
first: a CUDA allocation failure often drags host-side errors after it.
"""

from __future__ import annotations

import re
from typing import Literal

MemoryKind = Literal["device", "host"]

DEVICE_OOM = re.compile(
    r"CUDA out of memory"
    r"|CUDA error: out of memory"
    r"|torch\.OutOfMemoryError"
    r"|OutOfMemoryError: CUDA"
    r"|CUBLAS_STATUS_ALLOC_FAILED"
    r"|HIP out of memory"
)
HOST_OOM = re.compile(
    r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)"
    r"|\bMemoryError\b"
    r"|[Cc]an't allocate memory"
    r"|Cannot allocate memory"
    r"|std::bad_alloc"
    # A thread's stack could not be allocated.
    r"|can't start new thread"
    # Ray's memory monitor killed a worker of the job.
    r"|ray\.exceptions\.OutOfMemoryError"
    r"|Task was killed due to the node running low on memory"
    # The shell's word for a child the kernel's OOM killer took.
    r"|Killed\s*$",
    re.M,
)


def memory_exhausted(text: str) -> MemoryKind | None:
    """Whether `text` says device or host memory ran out."""
    if DEVICE_OOM.search(text):
        return "device"
    if HOST_OOM.search(text):
        return "host"
    return None
