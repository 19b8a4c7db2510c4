"""Runs: the record `runs get` shows, the brief one `runs list` shows, their snapshots,
metrics, lineage and job output, the lines `runs wait` streams, and what a user sends to steer
a run. The plan a run starts from is `core.plans.RunPlan`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field

from akka_training.api.base import (
    RequestBody,
    ResponseBody,
    Timestamp,
    flag_key,
    optional_key,
)
from akka_training.core.bounds import Int, Name
from akka_training.core.limits import INT32_MAX

if TYPE_CHECKING:
    from akka_training.core.plans import RunPlan
else:

    def __getattr__(name: str) -> Any:
        # `RunPlan` is re-exported from `core.plans` when first asked for: no model here holds
        # a plan, and defining the plans' models takes some 8 ms that `runs list` (and every
        # command but `runs start`) would pay.
        if name == "RunPlan":
            from akka_training.core.plans import RunPlan

            return RunPlan
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Cost",
    "DataFit",
    "DeriveRequest",
    "DryRun",
    "Failure",
    "Health",
    "HealthMonitor",
    "JobLogs",
    "MemorySplit",
    "Metrics",
    "MonitorPause",
    "PauseRequest",
    "Progress",
    "Queue",
    "Results",
    "RunEndLine",
    "RunEventLine",
    "RunPlan",
    "RunProgressLine",
    "RunRecord",
    "RunSource",
    "RunSummary",
    "RunTree",
    "RunWaitLine",
    "Snapshot",
    "Stalled",
    "StepFigures",
    "TreeNode",
    "TreeOrigin",
]


# --- the record ------------------------------------------------------------------------------


class Progress(ResponseBody):
    observed_step: int = Field(description="The last step the job reported.")
    total_steps: int | None = Field(description="Known once the job has tokenised its data.")
    saved_step: int | None = Field(description="The step of the last committed snapshot.")


class RunSource(ResponseBody):
    """The run this one starts from."""

    run: str
    snapshot: str | None
    kind: str | None = Field(description="warm-start, branch or continue.")


class Failure(ResponseBody):
    code: str = Field(description="A value of core.failures.FailureReason.")
    reason: str = Field(description="The sentence for a person, then any detail.")
    first_line: str


class RunSummary(ResponseBody):
    """A run as `runs list` shows it."""

    id: str
    project: str
    model_name: str | None
    description: str | None
    method: str = Field(description="sft, dpo, grpo or gspo.")
    engine: str = Field(description="trl or verl.")
    base_model: str
    dataset: str = Field(description="The pinned dataset, PROJECT/NAME:vN.")
    phase: str = Field(
        description="QUEUED, PREPARING, TRAINING, PAUSING, PAUSED, COMPLETED, FAILED or CANCELLED."
    )
    phase_since: Timestamp
    progress: Progress
    attempt: int = Field(description="The current attempt's number; 0 before the first.")
    requested: str | None = Field(description="cancel, pause-save or pause-latest, until done.")
    pool: str
    gpus: int
    created_at: Timestamp
    started_at: Timestamp | None
    ended_at: Timestamp | None
    pipeline: str | None
    stage: str | None
    source: RunSource | None
    failure: Failure | None


class Results(ResponseBody):
    model: str | None = Field(description="The final adapter's key in the blob store.")
    training_loss: float | None
    reward: float | None
    adapter_modules: list[str] | None


class DataFit(ResponseBody):
    """How the dataset fit `maxSeqLength`, as the job counted it."""

    rows: int | None = optional_key()
    rows_without_answer: int | None = optional_key("verl: rows with no reference answer.")
    rows_truncated: int | None = optional_key("Rows longer than the limit (dropped ones too).")
    answers_truncated: int | None = optional_key("Kept rows that lost part of their answer.")
    rows_dropped: int | None = optional_key()
    max_seq_length: int | None = optional_key()
    prompts_truncated: int | None = optional_key("Reinforcement runs: prompts over the limit.")
    padding_share: float | None = optional_key("The share of padding in a batch, 0 to 1.")


class MemorySplit(ResponseBody):
    """The memory of the step that reserved the most, in bytes, by part. The keys are the
    job's own figure names (``memory/<part>``), so they stay snake_case in JSON."""

    model_config = ConfigDict(alias_generator=None)

    step: int | None = optional_key()
    reserved: float | None = optional_key()
    peak: float | None = optional_key()
    weights: float | None = optional_key()
    adapter: float | None = optional_key()
    gradients: float | None = optional_key()
    optimizer: float | None = optional_key()
    activations: float | None = optional_key()
    generation: float | None = optional_key()
    allocator: float | None = optional_key()
    driver: float | None = optional_key()
    host_peak: float | None = optional_key("On a host without a device split: its peak RSS.")


class Cost(ResponseBody):
    gpu_seconds: float
    duration_seconds: float
    phase_seconds: dict[str, float] = Field(description="Seconds spent in each phase.")
    tokens_per_second: float | None
    mfu: float | None = Field(description="Model FLOPs utilisation, 0 to 1.")


class Queue(ResponseBody):
    position: int
    pool: str
    devices: int
    free: int
    quota: int | None
    held: int
    waiting_for: list[str]


class Stalled(ResponseBody):
    since: Timestamp
    dump: str | None = Field(description="Where the job recorded its threads and memory.")


class HealthMonitor(ResponseBody):
    """One health monitor at the latest step that reported its figure."""

    monitor: str = Field(description="As config.monitors.pauseOn names it.")
    figure: str = Field(description="The step figure it watches (see runs metrics).")
    value: float
    threshold: float
    direction: Literal["below", "above", "away"] = Field(
        description="below/above: past at or below/above the threshold; away: at or above it "
        "or at or below its inverse."
    )
    crossed: bool = Field(description="The value is past the threshold.")
    pauses_run: bool = Field(description="The plan names it in config.monitors.pauseOn.")


class MonitorPause(ResponseBody):
    """The pause a monitor caused."""

    monitor: str
    figure: str
    value: float
    threshold: float
    step: int
    reason: str


class Health(ResponseBody):
    """A reinforcement run's health monitors (docs/health-monitors.md)."""

    step: int | None = Field(description="The step the figures are from.")
    monitors: list[HealthMonitor]
    figures: dict[str, float] = Field(description="Every health figure of that step.")
    pause: MonitorPause | None = Field(description="The last pause a monitor caused.")


class Preference(ResponseBody):
    """A dpo run's preference figures at its latest step (docs/preference-fine-tuning.md): the
    implicit rewards (beta x the policy's log-probability ratio over the reference's) of the
    chosen and the rejected answers, their margin, the share of pairs ranked right, and the
    policy's log-probabilities of each answer; each a mean over the step's pairs."""

    step: int = Field(description="The step the figures are from.")
    rewards_chosen: float | None = optional_key()
    rewards_rejected: float | None = optional_key()
    rewards_margins: float | None = optional_key()
    rewards_accuracies: float | None = optional_key("The share of pairs ranked right, 0 to 1.")
    logps_chosen: float | None = optional_key()
    logps_rejected: float | None = optional_key()
    reference: str | None = optional_key(
        "What the rewards measure the policy against, in words: the base model, run RUN (its "
        "final adapter) or run RUN snapshot NAME; a continuation keeps its source run's."
    )


class RunRecord(RunSummary):
    """A run as `runs get` shows it."""

    results: Results
    data_fit: DataFit | None
    memory: MemorySplit | None
    cost: Cost
    queue: Queue | None = Field(description="Why a QUEUED run waits.")
    stalled: Stalled | None
    health: Health | None = optional_key("Reinforcement runs, once a step reported.")
    preference: Preference | None = optional_key("dpo runs, once a step reported.")
    settings: dict[str, Any] = Field(
        description=(
            "The resolved settings the run trains under (core.resolved.Settings as JSON). Kept "
            "a mapping rather than that model: plan models refuse unknown fields, so a client "
            "would fail on the settings of a newer service, and settings resolved by an older "
            "one lack defaults added since, so they would not dump back to what was stored."
        )
    )
    existing: bool = flag_key("True: a run with the plan's submissionId existed; this is it.")


class DryRun(ResponseBody):
    """What a dry run answers: the settings the plan would train under; nothing was started."""

    dry_run: Literal[True]
    settings: dict[str, Any] = Field(description="As RunRecord.settings.")


# --- what a run made --------------------------------------------------------------------------


class Snapshot(ResponseBody):
    run: str
    name: str
    step: int
    attempt: int | None
    weights: str
    training_state: str | None
    weights_bytes: int | None = Field(
        None, description="Bytes of the adapter in the store (null: not measured)."
    )
    training_state_bytes: int | None = Field(
        None, description="Bytes of the training state in the store (null: not measured)."
    )
    created_at: Timestamp
    swept: bool = Field(description="Removed by the keepAdapters sweep.")


class StepFigures(ResponseBody):
    """One step's figures: `step`, `attempt` and `at`, then each figure under its own name
    (``loss``, ``reward/mean``, ``memory/reserved``, ...), kept as extra fields."""

    # The figures' names are open (``terms/<term>/...``, ``rewards/<function>/...``): they are
    # this model's extra keys, the one answer that takes keys it does not declare.
    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, float] = Field(init=False)

    step: int
    attempt: int
    at: Timestamp

    @property
    def figures(self) -> dict[str, float]:
        return dict(self.__pydantic_extra__ or {})


class Metrics(ResponseBody):
    run: str
    method: str
    steps: list[StepFigures]


class TreeOrigin(ResponseBody):
    kind: str | None
    snapshot: str | None


class TreeNode(ResponseBody):
    run: str
    method: str
    phase: str
    origin: TreeOrigin | None = Field(
        alias="from", description="How the run started from its parent."
    )
    model_name: str | None
    children: list[TreeNode]


class RunTree(ResponseBody):
    root: str
    focus: str
    tree: TreeNode


class JobLogs(ResponseBody):
    run: str
    attempt: int | None
    text: str
    offset: int = Field(description="Where to read on from.")
    open: bool = Field(description="Whether the job may still write more.")


# --- runs wait: one JSON object a line -------------------------------------------------------


class RunEventLine(ResponseBody):
    type: Literal["event"]
    id: int
    at: Timestamp
    kind: str = Field(description="submitted, phase, request, stall, pipeline, ...")
    message: str
    data: dict[str, Any] | None


class RunProgressLine(ResponseBody):
    type: Literal["progress"]
    phase: str
    step: int
    total_steps: int | None
    loss: float | None = optional_key("The step's training loss (sft).")
    reward: float | None = optional_key("The step's mean reward (grpo, gspo).")
    terms: dict[str, float] | None = optional_key(
        "Each reward term's mean weighted share at the step (grpo, gspo)."
    )
    eta_seconds: float | None = optional_key(
        "Time left at the pace of this attempt's steps so far."
    )


class RunEndLine(ResponseBody):
    """The last line: the full record once the run ended (or paused, with until=rest), or at
    the timeout."""

    type: Literal["run"]
    timed_out: bool
    run: RunRecord


RunWaitLine = Annotated[RunEventLine | RunProgressLine | RunEndLine, Field(discriminator="type")]


# --- requests ----------------------------------------------------------------------------------


class PauseRequest(RequestBody):
    checkpoint: str = Field(
        "save", description="save: snapshot at the next step; latest: stop at the last snapshot."
    )


class DeriveRequest(RequestBody):
    """A branch (from a snapshot's weights) or a continuation (from its training state)."""

    snapshot: Name
    steps: Int | None = Field(None, ge=1, le=INT32_MAX)
    overrides: dict[str, Any] | None = Field(None, description="Plan fields to change.")
    dry_run: bool = False
