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
    JOB_LOST = "job-lost"
    TRAINING_ERROR = "training-error"
    DATA_ERROR = "data-error"
    REWARD_ERROR = "reward-error"
    SOURCE_UNAVAILABLE = "source-unavailable"
    STORE_UNREACHABLE = "store-unreachable"
    UPSTREAM_STAGE_FAILED = "upstream-stage-failed"

    @property
    def sentence(self) -> str:
        return _SENTENCES[self]


_SENTENCES: dict[FailureReason, str] = {
    FailureReason.JOB_START_FAILED: ("this run's job could not be started on the training cluster"),
    FailureReason.CLUSTER_UNREACHABLE: (
        "the training cluster could not be reached while this run waited for its devices"
    ),
    FailureReason.DEVICE_OOM: (
        "this run ran out of device memory (GPU memory); lower config.hyperparams.training."
        "batchSize or config.maxSeqLength (for grpo or gspo: config.rlHyperparams."
        "generationsPerPrompt or maxCompletionTokens), or use a larger GPU"
    ),
    FailureReason.HOST_OOM: (
        "this run ran out of host memory (the job was stopped by the out-of-memory limit of its "
        "node); lower config.hyperparams.training.batchSize or config.maxSeqLength (for grpo or "
        "gspo: generationsPerPrompt or maxCompletionTokens), run fewer GPUs per node, or use a "
        "pool with more HOST RAM"
    ),
    FailureReason.JOB_CRASHED: "this run's job stopped unexpectedly; its last log lines follow",
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
    FailureReason.UPSTREAM_STAGE_FAILED: (
        "an earlier stage of this run's pipeline did not complete, so this stage could not start"
    ),
}


def failure_text(reason: FailureReason, detail: str | None = None) -> str:
    """The full ``failureReason``: the sentence, then the detail on the following lines."""
    if not detail:
        return reason.sentence
    return f"{reason.sentence}\n{detail.strip()}"
