"""What a training job reports to the service, and what the service answers.

A job posts each report to ``/v1/jobs/{run}/attempts/{attempt}/{kind}`` with the token of its
attempt. Every answer is a `Directive`: the job keeps training, saves a snapshot and stops (a
pause with ``--checkpoint save``), or stops at once (a cancel, or a pause at the latest
snapshot). A report for an attempt that is no longer the run's current one is refused with 409,
and the job stops.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from akka_training.core.plans import PlanModel

Action = Literal["continue", "save-and-stop", "stop"]

# A stop outranks a save-and-stop, which outranks continue.
ACTION_RANK: dict[str, int] = {"continue": 0, "save-and-stop": 1, "stop": 2}


def strongest(actions: list[str]) -> str:
    """The directive that outranks the others (``continue`` for none)."""
    return max(actions, key=ACTION_RANK.__getitem__, default="continue")


def unbatched(kind: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A report as the reports it holds: a ``batch`` as its reports, in order; any other
    report as itself."""
    if kind == "batch":
        return [(r["kind"], r["body"]) for r in body.get("reports", [])]
    return [(kind, body)]


class Gpu(PlanModel):
    index: int
    uuid: str | None = None
    name: str | None = None


class Placement(PlanModel):
    host: str
    pid: int
    pod: str | None = None
    node: str | None = None
    gpus: list[Gpu] = Field(default_factory=list)
    # A job that answers requests (an interactive run's): where the service reaches its API, and
    # the key it sends there.
    api_url: str | None = None
    api_key: str | None = None


class StartedReport(PlanModel):
    placement: Placement


class TrainingReport(PlanModel):
    """The job finished loading and tokenising and is about to run its first step."""

    total_steps: int | None = None
    data_fit: dict[str, Any] | None = None
    adapter_modules: list[str] = Field(default_factory=list)


class MonitorPause(PlanModel):
    """A health monitor named in ``config.monitors.pauseOn`` stayed past its threshold: the
    job saves a snapshot at this step and stops, and the service pauses the run."""

    monitor: str
    figure: str
    value: float
    threshold: float
    step: int = Field(ge=1)
    reason: str  # the sentence `runs get` shows


# The oldest a step report may say its step is (`StepReport.ago`): a day.
MAX_REPORT_AGE_S = 86_400.0


class StepReport(PlanModel):
    step: int = Field(ge=1)
    total_steps: int | None = None
    # Flat figures by name (loss, reward, learning_rate, tokens, timing/..., memory/...).
    metrics: dict[str, float] = Field(default_factory=dict)
    pause: MonitorPause | None = None
    # Seconds from the step's end to the sending of its report (set by the job's reporter):
    # a step that waited to go with others, or for the service, is recorded at its own time.
    ago: float | None = Field(None, ge=0, le=MAX_REPORT_AGE_S)


# Reports a job may send several of in one ``batch`` report, and the most one batch holds (a
# job sends more as several).
BATCHED_KINDS = ("steps", "rollouts", "snapshots")
# How often at most a job sends its batched reports, unless trainer.controller.report-seconds
# says otherwise (the setting's own default is the same).
REPORT_SECONDS = 1.0
BATCH_LIMIT = 1000


class BatchedReport(PlanModel):
    """One report of a ``batch``: its kind and its body, as it would have come alone."""

    kind: Literal["steps", "rollouts", "snapshots"]
    body: dict[str, Any]


class BatchReport(PlanModel):
    """Reports that queued while the job waited to send (`HttpReporter` sends step, rollout
    and snapshot reports at most about twice a second): the service takes them in order, as
    if each had come on its own, and answers once."""

    reports: list[BatchedReport] = Field(min_length=1, max_length=BATCH_LIMIT)


class SnapshotReport(PlanModel):
    name: str
    step: int = Field(ge=0)
    weights: str
    training_state: str | None = None
    # What the snapshot's parts hold in the store, when the engine measured them.
    weights_bytes: int | None = Field(None, ge=0)
    training_state_bytes: int | None = Field(None, ge=0)


class RolloutsReport(PlanModel):
    """One step's rollouts, written by the job to the blob store as one file."""

    step: int = Field(ge=1)
    blob: str
    count: int = Field(ge=0)
    best_score: float | None = None
    worst_score: float | None = None


class HeartbeatReport(PlanModel):
    step: int | None = None
    # Set by the job's watchdog when steps stopped completing: where the dump lies.
    stall_dump: str | None = None


def _figure() -> Any:
    """A figure sent only when the job has it: None in Python, absent in JSON."""
    return Field(None, exclude_if=lambda value: value is None)


class JobSummary(PlanModel):
    """The closing figures a job reports with its end; they replace the latest step's on the
    run (`core.run_figures.RunFigures.with_end`). A figure the job does not have is left out."""

    loss: float | None = _figure()  # the last logged training loss (sft)
    reward: float | None = _figure()  # the last step's mean reward (grpo, gspo)
    # Tool calls over the whole run, by tool: made, failed, timed out (runs with tools).
    tool_calls: dict[str, int] | None = _figure()
    tool_failures: dict[str, int] | None = _figure()
    tool_timeouts: dict[str, int] | None = _figure()


class FinishedReport(PlanModel):
    adapter: str
    step: int = Field(ge=0)
    adapter_modules: list[str] = Field(default_factory=list)
    summary: JobSummary = Field(default_factory=JobSummary)


class StoppedReport(PlanModel):
    """The job stopped because it was told to (save-and-stop or stop)."""

    step: int = Field(ge=0)


class FailedReport(PlanModel):
    code: str  # a FailureReason value
    detail: str | None = None
