"""Why a run failed: one enum from which the sentence a user reads derives (a failed run is
FAILED whatever its reason).

The API carries the reason's value (``failureReason`` is the sentence, ``failureCode`` the
value); `docs/why-a-run-failed.md` lists every member. A sentence names what could not be done and
what to change.
"""

from __future__ import annotations

from enum import StrEnum


class FailureReason(StrEnum):
    JOB_START_FAILED = "job-start-failed"
    CLUSTER_UNREACHABLE = "cluster-unreachable"
    DEVICE_OOM = "device-oom"
    HOST_OOM = "host-oom"
    JOB_CRASHED = "job-crashed"
    JOB_KILLED = "job-killed"
    JOB_LOST = "job-lost"
    TRAINING_ERROR = "training-error"
    DATA_ERROR = "data-error"
    REWARD_ERROR = "reward-error"
    SOURCE_UNAVAILABLE = "source-unavailable"
    STORE_UNREACHABLE = "store-unreachable"
    STORAGE_FULL = "storage-full"
    UPSTREAM_STAGE_FAILED = "upstream-stage-failed"

    @property
    def sentence(self) -> str:
        return _SENTENCES[self]


_SENTENCES: dict[FailureReason, str] = {
    FailureReason.JOB_START_FAILED: ("this run's job could not be started on the training cluster"),
    FailureReason.CLUSTER_UNREACHABLE: (
        "the training cluster could not be reached while this run waited for its devices"
    ),
    FailureReason.DEVICE_OOM: "this run ran out of device memory (GPU memory)",
    FailureReason.HOST_OOM: "this run ran out of host memory",
    FailureReason.JOB_CRASHED: "this run's job stopped unexpectedly; its last log lines follow",
    FailureReason.JOB_KILLED: (
        "this run's job was killed (SIGKILL) though the trainer did not ask it to stop, and the "
        "kernel recorded no out-of-memory kill; it was run again from its last snapshot as "
        "often as trainer.controller.job-retries allows"
    ),
    FailureReason.JOB_LOST: (
        "this run's job disappeared from the training cluster and could not be restarted"
    ),
    FailureReason.TRAINING_ERROR: "this run's training raised an error; its message follows",
    FailureReason.DATA_ERROR: "this run's dataset could not be prepared for training",
    FailureReason.REWARD_ERROR: "this run's reward could not be computed",
    FailureReason.SOURCE_UNAVAILABLE: "the adapter this run starts from could not be loaded",
    FailureReason.STORE_UNREACHABLE: (
        "this run's job could not reach the blob store; the detail names the store and the "
        "settings to check"
    ),
    FailureReason.STORAGE_FULL: (
        "the storage this run writes to is full (no space left on the device); free space in "
        "the blob store (trainer.storage.url) or lower execution.keepAdapters, then start a "
        "new run from the last snapshot with `runs continue RUN --snapshot NAME --steps N` "
        "(a failed run cannot be resumed)"
    ),
    FailureReason.UPSTREAM_STAGE_FAILED: (
        "an earlier stage of this run's pipeline did not complete, so this stage could not start"
    ),
}


# What to change after running out of memory, by the settings of the run's method: an sft run
# sizes its memory with its batch, a grpo or gspo run with its generations.
_MEMORY_SETTINGS = {
    "sft": "lower config.hyperparams.training.batchSize or config.maxSeqLength",
    "rl": (
        "lower config.rlHyperparams.generationsPerPrompt, promptsPerStep or "
        "maxCompletionTokens, or config.maxSeqLength"
    ),
}
_MEMORY_MORE = {
    FailureReason.DEVICE_OOM: "or use a larger GPU",
    FailureReason.HOST_OOM: "run fewer GPUs per node, or use a pool with more HOST RAM",
}


def advice(reason: FailureReason, method: str | None) -> str | None:
    """What to change, for a reason that has a remedy in the run's settings (`method` names
    the run's method: sft, dpo, grpo or gspo)."""
    more = _MEMORY_MORE.get(reason)
    if more is None:
        return None
    kind = "sft" if method in ("sft", "dpo") else "rl" if method in ("grpo", "gspo") else None
    if kind is None:
        return (
            f"{_MEMORY_SETTINGS['sft']} (for grpo or gspo: "
            f"{_MEMORY_SETTINGS['rl'].removeprefix('lower ')}), {more}"
        )
    return f"{_MEMORY_SETTINGS[kind]}, {more}"


def failure_text(
    reason: FailureReason, detail: str | None = None, method: str | None = None
) -> str:
    """The full ``failureReason``: the sentence (with what to change, in the settings of the
    run's `method`), then the detail on the following lines."""
    remedy = advice(reason, method)
    first = f"{reason.sentence}; {remedy}" if remedy else reason.sentence
    if not detail:
        return first
    return f"{first}\n{detail.strip()}"
