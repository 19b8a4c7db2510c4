"""How a training job fails: the errors an engine raises, and from any exception the failure
the entry point reports.

The entry point reports `failed` with a `FailureReason` value as ``code`` and a ``detail``; the
service shows the reason's sentence followed by the detail. The errors::

    JobError                 the reason is known where it is raised (training-error)
     ├── JobStartFailed      the engine's own environment cannot start (job-start-failed)
     ├── DeviceOutOfMemory   device memory ran out, found in the engine's output (device-oom)
     ├── HostOutOfMemory     host memory ran out, found in the engine's output (host-oom)
     ├── JobCrashed          the engine's process died without saying why (job-crashed)
     ├── DataError           the dataset cannot be read or prepared (data-error)
     ├── SourceUnavailable   the adapter or state the run starts from cannot be had
     │                       (source-unavailable)
     └── RewardError         the reward cannot be set up or computed (reward-error)

A `JobError` is reported as it is: its class's reason and its message as the detail. Anything
else is classified: running out of memory anywhere in its chain (device or host, with the run's
settings to lower in the detail), else a `JobError` it wraps, else the blob store's
`StoreUnreachable` it wraps (store-unreachable; the detail names the URL and the settings), else
no space left (storage-full), else ``training-error`` with the traceback's last lines. An engine
that wraps an exception it did not expect into a `JobError` first lets out-of-memory errors
through (`out_of_memory`), so they are reported as such.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator

from akka_training.core.errors import storage_full
from akka_training.core.exits import MemoryKind, memory_exhausted
from akka_training.core.failures import FailureReason
from akka_training.core.plans import RL_METHODS
from akka_training.core.resolved import Settings
from akka_training.core.storage import StoreUnreachable

# Lines of the traceback kept as the detail of a training error.
DETAIL_LINES = 20


class JobError(Exception):
    """An error whose failure reason is known where it is raised; its message is the detail
    (which may be empty: the reason's sentence then stands alone)."""

    reason: FailureReason = FailureReason.TRAINING_ERROR

    @property
    def detail(self) -> str:
        return str(self)


class Diverged(JobError):
    """A step's loss or gradient norm is NaN or infinite (`core.monitors.non_finite_loss`): the
    detail names the step, the figure and what to change."""


class StorageFull(JobError):
    """A write to the blob store (or the job's own disk) found no space left."""

    reason = FailureReason.STORAGE_FULL


class JobStartFailed(JobError):
    """The engine's own environment is missing or cannot run (verl's interpreter, ...)."""

    reason = FailureReason.JOB_START_FAILED


class DeviceOutOfMemory(JobError):
    """The engine's process ran out of device memory (read from its output)."""

    reason = FailureReason.DEVICE_OOM


class HostOutOfMemory(JobError):
    """The engine's process ran out of host memory (read from its output or its exit)."""

    reason = FailureReason.HOST_OOM


class JobCrashed(JobError):
    """The engine's process exited with an error and left no traceback."""

    reason = FailureReason.JOB_CRASHED


class DataError(JobError):
    """The dataset cannot be read or prepared: a malformed row, no usable rows, ..."""

    reason = FailureReason.DATA_ERROR


class SourceUnavailable(JobError):
    """The adapter (or training state) the run starts from cannot be downloaded or loaded."""

    reason = FailureReason.SOURCE_UNAVAILABLE


class RewardError(JobError):
    """The reward could not be set up, or computed for a generation batch."""

    reason = FailureReason.REWARD_ERROR


def classify_failure(exc: BaseException, settings: Settings | None) -> tuple[FailureReason, str]:
    """The failure reason of `exc` and the detail to report (see the module docstring)."""
    if isinstance(exc, JobError):
        return exc.reason, exc.detail
    found = _memory_error(exc)
    if found is not None:
        kind, error = found
        reason = FailureReason.DEVICE_OOM if kind == "device" else FailureReason.HOST_OOM
        return reason, oom_detail(kind, error, settings)
    for error in _chain(exc):
        if isinstance(error, JobError):
            return error.reason, error.detail
        if isinstance(error, StoreUnreachable):
            return FailureReason.STORE_UNREACHABLE, error.message
    full = storage_full(exc)
    if full is not None:
        where = f" writing {full.filename}" if full.filename else ""
        return FailureReason.STORAGE_FULL, f"no space left on the device{where}: {full}"
    return FailureReason.TRAINING_ERROR, last_lines(exc)


def out_of_memory(exc: BaseException) -> MemoryKind | None:
    """Which memory ran out, when `exc` (or an exception it wraps) says so."""
    found = _memory_error(exc)
    return found[0] if found is not None else None


def oom_detail(where: str, error: BaseException, settings: Settings | None) -> str:
    """What ran out and the values of the settings that size memory use, so the person who
    started the run sees what to lower."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    # Which limit applied: on the host, the job's own allocation failed (nothing killed it).
    limit = " (an allocation of the job itself failed)" if where == "host" else ""
    lines = [f"{where} memory ran out{limit}: {type(error).__name__}: {first}"[:500]]
    if settings is not None:
        lines.append("current settings: " + ", ".join(memory_settings(settings)))
    return "\n".join(lines)


def memory_settings(settings: Settings) -> list[str]:
    """The run's settings that size its memory, as ``name value`` pairs."""
    config = settings.config
    out = [f"config.maxSeqLength {config.max_seq_length}"]
    if settings.method in RL_METHODS and config.rl_hyperparams is not None:
        rl = config.rl_hyperparams
        out += [
            f"config.rlHyperparams.promptsPerStep {rl.prompts_per_step}",
            f"config.rlHyperparams.generationsPerPrompt {rl.generations_per_prompt}",
            f"config.rlHyperparams.maxCompletionTokens {rl.max_completion_tokens}",
        ]
    elif config.hyperparams is not None:
        training = config.hyperparams.training
        out += [
            f"config.hyperparams.training.batchSize {training.batch_size}",
            f"config.hyperparams.training.gradientAccumulation {training.gradient_accumulation}",
        ]
    out.append(f"execution.gpus {settings.execution.gpus}")
    return out


def last_lines(exc: BaseException, count: int = DETAIL_LINES) -> str:
    text = "".join(traceback.format_exception(exc)).rstrip()
    return "\n".join(text.splitlines()[-count:])


def _memory_error(exc: BaseException) -> tuple[MemoryKind, BaseException] | None:
    for error in _chain(exc):
        memory = memory_exhausted(str(error))
        if _torch_out_of_memory(error) or memory == "device":
            return "device", error
        if isinstance(error, MemoryError) or memory == "host":
            return "host", error
    return None


def _torch_out_of_memory(error: BaseException) -> bool:
    # Only a process that loaded torch can hold torch's error: torch is not imported to look.
    if "torch" not in sys.modules:
        return False
    import torch

    return isinstance(error, torch.OutOfMemoryError)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
