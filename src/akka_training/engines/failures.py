"""From an exception in a training job to the failure it reports.

The entry point reports `failed` with a `FailureReason` value as ``code`` and a ``detail``; the
service shows the reason's sentence followed by the detail. Out-of-memory errors are told apart
by where memory ran out (device or host), and their detail names the run's own settings to lower.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator

import torch

from akka_training.core.exits import memory_exhausted
from akka_training.core.failures import FailureReason
from akka_training.core.plans import RL_METHODS
from akka_training.core.resolved import Settings

# Lines of the traceback kept as the detail of a training error.
DETAIL_LINES = 20


class JobError(Exception):
    """An error whose failure reason is known where it is raised."""

    reason: FailureReason = FailureReason.TRAINING_ERROR


class DataError(JobError):
    """The dataset cannot be read or prepared: a malformed row, no usable rows, ..."""

    reason = FailureReason.DATA_ERROR


class SourceUnavailable(JobError):
    """The adapter (or training state) the run starts from cannot be downloaded or loaded."""

    reason = FailureReason.SOURCE_UNAVAILABLE


class RewardError(JobError):
    """The reward could not be computed for a generation batch."""

    reason = FailureReason.REWARD_ERROR


def classify_failure(exc: BaseException, settings: Settings | None) -> tuple[FailureReason, str]:
    """The failure reason of `exc` (or of the exception it wraps) and the detail to report."""
    for error in _chain(exc):
        memory = memory_exhausted(str(error))
        if isinstance(error, torch.OutOfMemoryError) or memory == "device":
            return FailureReason.DEVICE_OOM, oom_detail("device", error, settings)
        if isinstance(error, MemoryError) or memory == "host":
            return FailureReason.HOST_OOM, oom_detail("host", error, settings)
    for error in _chain(exc):
        if isinstance(error, JobError):
            return error.reason, str(error) or type(error).__name__
    return FailureReason.TRAINING_ERROR, last_lines(exc)


def oom_detail(where: str, error: BaseException, settings: Settings | None) -> str:
    """What ran out and the values of the settings that size memory use, so the person who
    started the run sees what to lower."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    lines = [f"{where} memory ran out: {type(error).__name__}: {first}"[:500]]
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


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
