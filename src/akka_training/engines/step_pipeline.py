"""What a training step owes once it trained, in one order, for every engine.

An engine trains; `StepPipeline` does the rest, the same for TRL's callback (`trl.steps`) and
the verl engine (`verl.engine`)::

    pipeline = StepPipeline.for_job(job, "rl", total_steps, monitors=..., rollouts=...)
    pipeline.begin()                                   # training began
    health, pause = pipeline.check(step, figures)      # 1. the monitors see the step
    ... the engine saves a snapshot when the directive asks (a tripped monitor asks too) ...
    action = pipeline.finish(FinishedStep(...))        # 2. to 8., then the directive

1. `check`: the health monitors see the step's figures and add theirs; a monitor that trips
   asks the reporter for a save-and-stop (`HttpReporter.direct`: a stop the service gave stays
   a stop), and the step's report carries its pause. A loss or gradient norm that is NaN or
   infinite (``non-finite-loss``, `core.monitors.non_finite_loss`) pauses the run the same way
   when ``config.monitors.pauseOn`` names it, in every method. It comes before the engine decides
   whether the step saves: a monitor's pause saves a snapshot at the step it tripped at (TRL),
   or at the end of the step the engine is in (verl).
2. the step's report: its figures and its pause;
3. telemetry: the step's figures (metrics.jsonl, TensorBoard, OTLP, MLflow), what scoring its
   rollouts cost (the reward terms' timings, failures, judge tokens, retries) and the rollout
   histograms;
4. rollouts: the step file, handed to the rollout files (`RolloutFiles`: TRL's write in the
   background, verl's at once), which store it and report it after the step;
5. the snapshot taken at this step, reported once every rollout file handed over before it is
   stored (a snapshot never refers to rollouts that could be lost);
6. the stall watchdog hears that a step completed;
7. the trace: the step's span, its phases under it;
8. the directive the engine obeys now: the reporter's; or, when the step's loss or gradient
   norm is NaN or infinite and nothing paused the run, `failures.Diverged`, naming the step and
   the figure, which fails the run (the step's report, with its figures, goes first).

The parts a job may not have (the health monitors of an SFT run, rollout files, telemetry,
spans, the stall watchdog) are null objects: `for_job` puts them where the job has none, and
the steps above call every part alike.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from akka_training.core.monitors import (
    NON_FINITE_LOSS,
    diverged_pause_reason,
    diverged_reason,
    non_finite_loss,
)
from akka_training.core.reports import Action, MonitorPause, SnapshotReport, StepReport
from akka_training.engines.context import JobContext
from akka_training.engines.failures import Diverged
from akka_training.rewards.figures import histogram_values
from akka_training.rewards.rollouts import Rollout
from akka_training.rewards.scoring import ScoreStats
from akka_training.telemetry import catalog as names
from akka_training.telemetry.figures import Kind
from akka_training.telemetry.tracing import RecordedSpan

log = logging.getLogger(__name__)


# --- the parts ------------------------------------------------------------------------------


class StepReporter(Protocol):
    """What the pipeline asks of the job's reporter (`engines.reporter.HttpReporter`)."""

    @property
    def action(self) -> Action: ...

    def report_step(self, report: StepReport) -> None: ...

    def snapshot(self, report: SnapshotReport) -> None: ...

    def direct(self, action: Action) -> None: ...


class Monitors(Protocol):
    """The run's health monitors (`rewards.health.HealthWatch`)."""

    def observe(
        self, step: int, figures: Mapping[str, float]
    ) -> tuple[dict[str, float], MonitorPause | None]: ...


class StepTelemetry(Protocol):
    """The job's metrics (`telemetry.job_metrics.JobTelemetry`)."""

    def training(self, kind: Kind) -> None: ...

    def stalled(self, is_stalled: bool) -> None: ...

    def step(self, kind: Kind, step: int, figures: Mapping[str, float]) -> None: ...

    def reward_stats(
        self,
        *,
        timings: Mapping[str, Sequence[float]] | None = None,
        failures: Mapping[tuple[str, str], int] | None = None,
        judge_prompt_tokens: Mapping[str, int] | None = None,
        judge_completion_tokens: Mapping[str, int] | None = None,
        retries: Mapping[str, int] | None = None,
    ) -> None: ...

    def histograms(self, values_by_name: Mapping[str, Sequence[float]]) -> None: ...


class StepTracing(Protocol):
    """The job's spans (`telemetry.tracing.Tracing`)."""

    def record(
        self,
        name: str,
        start_s: float,
        end_s: float,
        attributes: Mapping[str, Any] | None = None,
        *,
        children: Sequence[RecordedSpan] = (),
    ) -> None: ...


class Watchdog(Protocol):
    """The job's stall watchdog (`engines.watchdog.StallWatchdog`)."""

    def arm(self) -> None: ...

    def progress(self) -> None: ...


class RolloutFiles(Protocol):
    """Where a step's rollouts go (`step_files.StepFileWriter` in the background,
    `step_files.StepFiles` at once): `submit` hands a step's over, to be stored and reported;
    `wait` returns once every step handed over is, and raises if one could not be."""

    def submit(self, step: int, rollouts: Sequence[Rollout]) -> None: ...

    def wait(self) -> None: ...


class NoMonitors:
    """An SFT run's: nothing to watch."""

    def observe(
        self, step: int, figures: Mapping[str, float]
    ) -> tuple[dict[str, float], MonitorPause | None]:
        return {}, None


class NoTelemetry:
    def training(self, kind: Kind) -> None:
        return None

    def stalled(self, is_stalled: bool) -> None:
        return None

    def step(self, kind: Kind, step: int, figures: Mapping[str, float]) -> None:
        return None

    def reward_stats(self, **accounting: Any) -> None:
        return None

    def histograms(self, values_by_name: Mapping[str, Sequence[float]]) -> None:
        return None


class NoTracing:
    def record(
        self,
        name: str,
        start_s: float,
        end_s: float,
        attributes: Mapping[str, Any] | None = None,
        *,
        children: Sequence[RecordedSpan] = (),
    ) -> None:
        return None


class NoWatchdog:
    def arm(self) -> None:
        return None

    def progress(self) -> None:
        return None


class NoRolloutFiles:
    """An SFT run's: no rollouts."""

    def submit(self, step: int, rollouts: Sequence[Rollout]) -> None:
        return None

    def wait(self) -> None:
        return None


# --- a step -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepSpan:
    """A step's span: when it began and ended (`time.time()` seconds) and its phases."""

    began: float
    ended: float
    phases: Sequence[RecordedSpan] = ()


def nothing_scored() -> ScoreStats:
    """What scoring a step's rollouts cost when none were scored."""
    return ScoreStats(
        seconds={},
        failures={},
        judge_prompt_tokens={},
        judge_completion_tokens={},
        wall_seconds=0.0,
    )


@dataclass
class FinishedStep:
    """A step once it trained (and saved, when it did): what `StepPipeline.finish` reports.

    `figures`: every figure of the step, the monitors' included (`check`); `pause`: the pause a
    monitor asked for at this step; `span`: its span (None: the engine did not time the step);
    `rollouts` and `scoring`: its rollouts and what scoring them cost; `snapshot`: the snapshot
    taken at this step, already in the store."""

    step: int
    figures: dict[str, float]
    pause: MonitorPause | None = None
    span: StepSpan | None = None
    rollouts: Sequence[Rollout] = ()
    scoring: ScoreStats = field(default_factory=nothing_scored)
    snapshot: SnapshotReport | None = None


@dataclass
class StepPipeline:
    """What every step owes once it trained, in one order (see the module docstring)."""

    reporter: StepReporter
    kind: Kind
    total_steps: int
    monitors: Monitors = field(default_factory=NoMonitors)
    rollouts: RolloutFiles = field(default_factory=NoRolloutFiles)
    telemetry: StepTelemetry = field(default_factory=NoTelemetry)
    tracing: StepTracing = field(default_factory=NoTracing)
    watchdog: Watchdog = field(default_factory=NoWatchdog)
    # When the job started (time.time()): the job's preparation span ends where training begins.
    started_at: float | None = None
    # The run's id, for the sentences it shows; whether its plan pauses on non-finite-loss.
    run: str = ""
    pause_on_diverged: bool = False

    @classmethod
    def for_job(
        cls,
        job: JobContext,
        kind: Kind,
        total_steps: int,
        *,
        monitors: Monitors | None = None,
        rollouts: RolloutFiles | None = None,
    ) -> StepPipeline:
        """The pipeline of `job`'s steps: its reporter, and each part it has (or a null one)."""
        watching = job.spec.settings.config.monitors
        return cls(
            reporter=job.reporter,
            kind=kind,
            total_steps=total_steps,
            monitors=monitors or NoMonitors(),
            rollouts=rollouts or NoRolloutFiles(),
            telemetry=job.telemetry or NoTelemetry(),
            tracing=job.tracing or NoTracing(),
            watchdog=job.watchdog or NoWatchdog(),
            started_at=job.started_at,
            run=job.spec.run_id,
            pause_on_diverged=watching is not None and NON_FINITE_LOSS in watching.pause_on,
        )

    def begin(self) -> None:
        """Training begins (the first step starts): the job's preparation span ends, the
        telemetry's phase is TRAINING with its step counter at 0, and the stall watchdog's
        clock starts. Every engine calls it once."""
        if self.started_at is not None:
            self.tracing.record(names.PREFIX + "job.prepare", self.started_at, time.time())
        self.telemetry.training(self.kind)
        self.watchdog.arm()

    def check(
        self, step: int, figures: Mapping[str, float]
    ) -> tuple[dict[str, float], MonitorPause | None]:
        """1. The monitors see the step's figures: their own figures, and the pause one asks
        for (a save-and-stop asked of the reporter) or None."""
        health, pause = self.monitors.observe(step, figures)
        diverged = non_finite_loss(figures)
        if pause is None and diverged is not None and self.pause_on_diverged:
            figure, value = diverged
            pause = MonitorPause(
                monitor=NON_FINITE_LOSS,
                figure=figure,
                value=value,
                threshold=sys.float_info.max,  # past any finite number
                step=step,
                reason=diverged_pause_reason(self.run, step, figure, value),
            )
        if pause is not None:
            log.warning("%s", pause.reason)
            self.reporter.direct("save-and-stop")
        return health, pause

    def finish(self, done: FinishedStep) -> Action:
        """2. to 8.: report the step, publish it, keep its rollouts, report its snapshot, feed
        the watchdog, trace it; the directive to obey now."""
        step, figures = done.step, done.figures
        self.reporter.report_step(
            StepReport(step=step, total_steps=self.total_steps, metrics=figures, pause=done.pause)
        )
        self.telemetry.step(self.kind, step, figures)
        scoring = done.scoring
        self.telemetry.reward_stats(
            timings=scoring.seconds,
            failures=scoring.failures,
            judge_prompt_tokens=scoring.judge_prompt_tokens,
            judge_completion_tokens=scoring.judge_completion_tokens,
            retries=scoring.retries,
        )
        if done.rollouts:
            self.telemetry.histograms(histogram_values(done.rollouts))
            self.rollouts.submit(step, done.rollouts)
        if done.snapshot is not None:
            self.rollouts.wait()
            self.reporter.snapshot(done.snapshot)
        self.watchdog.progress()
        if done.span is not None:
            record_step(self.tracing, step, done.span)
        diverged = non_finite_loss(figures)
        if diverged is not None and done.pause is None:
            raise Diverged(diverged_reason(step, *diverged))
        return self.reporter.action


def record_step(tracing: StepTracing, step: int, span: StepSpan) -> None:
    """A step's span (``job.step``, under the job's), its phases under it."""
    tracing.record(
        names.PREFIX + "job.step", span.began, span.ended, {names.STEP: step}, children=span.phases
    )
