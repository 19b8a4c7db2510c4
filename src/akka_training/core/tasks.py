"""Tasks: work the service has done on the cluster that is not a training run (a merge of an
adapter into its base model, a re-grading of a run's kept rollouts, a reward preview, an
evaluation, the verification of a run's figures and rollouts).

A task is one job on the cluster backend, started by the controller like a run's attempt but
with its own spec (`TaskSpec`, written to ``task.json`` beside it), its own token (scoped to
the task, exchanged at its start for the one-time credential in ``AKKA_TASK_BOOTSTRAP``) and
its own reports, posted to
``/v1/tasks/{task}/reports/{kind}``: `started`, `progress` (as often as it likes), and one end
report, `finished` with its result or `failed` with a sentence for the user. Each answer is a
`TaskDirective`: carry on, or stop (the task was cancelled). A task needs no devices: it holds
no claim, runs on the CPUs of a node of its pool, and never runs inside the service.

Each kind of task has its parameters and result here (`MergeParams`, `MergeResult`,
`RegradeParams`, `RegradeResult`, `VerifyParams`, `VerifyResult`, ...), its job
code in `akka_training.engines.tasks`, and its requests in the service.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from akka_training.core.plans import PlanModel, Reward
from akka_training.core.reports import Placement
from akka_training.core.resolved import BaseModelPin, BundlePin, Settings
from akka_training.core.storage import S3Options

# A task's one-time bootstrap credential, exchanged for its token at its start.
BOOTSTRAP_ENV = "AKKA_TASK_BOOTSTRAP"
TaskAction = Literal["continue", "stop"]


class TaskTelemetry(PlanModel):
    """Where a task's job publishes its metrics and spans (an evaluation's do), and the trace
    it joins: the traceparent of the span its submission was stored in."""

    collector_endpoint: str | None = None
    traceparent: str | None = None


class TaskSpec(PlanModel):
    """Everything a task's job is started with. The token travels in the environment."""

    task_id: str
    kind: str
    project: str
    run_id: str | None = None  # the run the task concerns, if any
    trainer_url: str
    storage_url: str
    # How to reach an S3 store (the credentials travel in the job's environment).
    storage_s3: S3Options = Field(default_factory=S3Options)
    params: dict[str, Any] = Field(default_factory=dict)
    telemetry: TaskTelemetry = Field(default_factory=TaskTelemetry)


# --- reports -----------------------------------------------------------------------------------


class TaskStartedReport(PlanModel):
    placement: Placement


class TaskProgressReport(PlanModel):
    """What the task is doing now, for the user who waits on it: ``loading the base model``,
    ``uploading`` with `done` of `total` (bytes, files, rows: the task's own unit)."""

    message: str
    done: float | None = None
    total: float | None = None
    # Where a long-lived task answers requests (an endpoint's job: ``http://HOST:PORT``).
    address: str | None = None
    # The key the trainer sends with each request there (`core.serving.KEY_HEADER`).
    key: str | None = None
    # What serves it (an endpoint's job: ``vllm`` or ``transformers``).
    engine: str | None = None


class TaskFinishedReport(PlanModel):
    result: dict[str, Any] = Field(default_factory=dict)


class TaskFailedReport(PlanModel):
    """`message`: the sentence for the user (what could not be done and what to change);
    `detail`: anything that helps beyond it (the error, a traceback's last line)."""

    message: str
    detail: str | None = None


TASK_REPORTS: dict[str, type[PlanModel]] = {
    "started": TaskStartedReport,
    "progress": TaskProgressReport,
    "finished": TaskFinishedReport,
    "failed": TaskFailedReport,
}


# --- the merge ---------------------------------------------------------------------------------

MERGE = "merge"


class FileDigest(PlanModel):
    path: str  # relative to the directory it belongs to, slash-separated
    bytes: int
    sha256: str


class MergeParams(PlanModel):
    """Merge the adapter under `weights` into `base_model` (`merge_and_unload`) and store the
    full model, its config and its tokenizer (from `tokenizer`, else the base model's) under
    `output`."""

    base_model: BaseModelPin
    weights: str
    tokenizer: str | None = None
    output: str
    snapshot: str | None = None


class MergeResult(PlanModel):
    output: str
    files: list[FileDigest]


def base_model_unavailable(model_id: str, path: str, where: str, run_id: str | None) -> str:
    """Why a merge cannot run: the cluster cannot read the base model's weights. `where` names
    the place that looked (``this host``, ``node gpu-3``)."""
    download = f"akka training runs download {run_id}" if run_id else "akka training runs download"
    return (
        f"The base model {model_id}'s weights are not available to the training cluster "
        f"({where} has no model at {path}), so the adapter cannot be merged into it there. "
        f"Download the adapter instead (`{download}`) and merge it where the base model is, "
        "or make the model's directory readable on the cluster's nodes."
    )


# --- the regrade -------------------------------------------------------------------------------

REGRADE = "regrade"


class RegradeSource(PlanModel):
    step: int
    blob: str  # the run's step file


class RegradeParams(PlanModel):
    """Score the rollouts kept in `steps` again with `reward` (its rule terms' bundles pinned in
    `bundles`, as a run's settings pin them), and keep the new step files under the task's
    own prefix (`blobkeys.regrade_prefix`). The run's own step files are only read."""

    reward: Reward
    bundles: dict[str, BundlePin] = Field(default_factory=dict)
    steps: list[RegradeSource]


class RegradeStep(PlanModel):
    """One step's figures before and after: the reward mean and each term's mean share (weight
    x value, averaged over the step's rollouts), and the terms that failed (term -> count)."""

    step: int
    count: int
    old_mean: float
    new_mean: float
    old_shares: dict[str, float]
    new_shares: dict[str, float]
    new_failures: dict[str, int] = Field(default_factory=dict)


class RegradeResult(PlanModel):
    output: str
    old_weights: dict[str, float]
    new_weights: dict[str, float]
    old_mean: float
    new_mean: float
    steps: list[RegradeStep]


# --- the reward preview ------------------------------------------------------------------------

PREVIEW = "preview"


class PreviewParams(PlanModel):
    """Score `rows` sampled rows of the dataset blob `dataset` with `reward`: each row's
    reference answer (where it has one), an empty completion and the prompt itself."""

    reward: Reward
    bundles: dict[str, BundlePin] = Field(default_factory=dict)
    dataset: str
    rows: int = Field(8, ge=1, le=1000)
    # For the estimate of memory and step time: the run's settings, the device memory its
    # catalog envelope qualifies per GPU (GiB; None or 0: not stated) and its pool's accelerator.
    settings: Settings | None = None
    envelope_gpu_memory_gib: float | None = None
    accelerator: str | None = None


class PreviewTerm(PlanModel):
    """One term's raw values over the sampled rows, per kind of completion (``reference``,
    ``empty``, ``prompt``): count, min, mean, max; and the flags it raised, as sentences."""

    name: str
    weight: float
    values: dict[str, dict[str, float]]
    flags: list[str] = Field(default_factory=list)


class MemoryEstimate(PlanModel):
    """GiB per GPU: the base weights, the adapter's trainable state, the activations of one
    micro-batch, and their sum."""

    weights_gib: float
    adapter_gib: float
    activations_gib: float
    total_gib: float


class PreviewEstimate(PlanModel):
    """Whether the run fits in memory and how long its policy update takes, from the model's
    size on disk, the plan's shape, the catalog envelope and the pool's accelerator;
    `rests_on` says, as sentences, what each figure assumes. `unavailable`: why there is no
    estimate (the other fields are then absent)."""

    unavailable: str | None = None
    parameters: int | None = None
    flop_parameters: int | None = None
    adapter_parameters: int | None = None
    precision: str | None = None
    memory: MemoryEstimate | None = None
    device_memory_gib: float | None = None
    fits: bool | None = None
    tokens_per_step: int | None = None
    peak_tflops: float | None = None
    assumed_mfu: float | None = None
    step_seconds: float | None = None
    rests_on: list[str] = Field(default_factory=list)


class PreviewResult(PlanModel):
    rows: int
    with_reference: int
    terms: list[PreviewTerm]
    estimate: PreviewEstimate | None = None


# --- the verification --------------------------------------------------------------------------

VERIFY = "verify"


class VerifySource(PlanModel):
    """One step to verify: its step file, the attempt that trained it (a new attempt starts a
    new baseline of the history monitors) and the figures it published (finite numbers)."""

    step: int
    attempt: int
    blob: str
    published: dict[str, float]


class VerifyParams(PlanModel):
    """Recompute every figure the steps published from their kept rollouts, and score each
    rollout again with the run's own `reward` (its rule terms' bundles pinned in `bundles`).
    `tokenizer`: the blob prefix of the run's tokenizer (the ``tokens`` figure counts prompt
    tokens too); `base_model`: its fallback, where the run stored none; `tools`: whether the run
    declared tools (their schema is part of each prompt, so ``tokens`` is then not recounted)."""

    reward: Reward
    bundles: dict[str, BundlePin] = Field(default_factory=dict)
    engine: str
    generations_per_prompt: int
    max_completion_tokens: int
    baseline_steps: int
    correctness_term: str | None = None
    tokenizer: str | None = None
    base_model: BaseModelPin | None = None
    tools: bool = False
    steps: list[VerifySource]


class VerifiedStep(PlanModel):
    step: int
    rollouts: int  # how many kept rollouts the figures were recomputed from
    figures: int  # how many published figures were compared
    rescored: int  # how many rollouts were scored again


class FigureDifference(PlanModel):
    """A published figure that is not what the kept rollouts say. `published` None: the step
    published no such figure."""

    step: int
    figure: str  # as `runs metrics` names it
    published: float | None
    recomputed: float


class RolloutDifference(PlanModel):
    """A kept rollout whose record the run's reward does not give again: `field` is ``score``,
    ``shares.<term>`` or ``values.<term>``; `kept` what the record holds, `rescored` what the
    reward gives its prompt, completion and expected answer now."""

    step: int
    index: int
    field: str
    kept: float | None
    rescored: float | None


class VerifyResult(PlanModel):
    """Every step verified, each figure and rollout that differs (none: the run's figures are
    what its rollouts say, and its rollouts are what its reward gives), and what could not be
    checked, as sentences."""

    run: str
    steps: list[VerifiedStep]
    differences: list[FigureDifference]
    rollouts: list[RolloutDifference]
    unchecked: list[str] = Field(default_factory=list)
