"""Per-step reporting for TRL runs: a `TrainerCallback` that, after every optimizer step,
gathers the step's figures, saves a snapshot when one is due (every ``execution.saveEvery``
steps, or when the service or a health monitor asks for a save-and-stop) and hands the step to
the job's `StepPipeline` (its report, telemetry, rollouts, snapshot, watchdog and span, in the
order every engine follows), then obeys the directive.

The Trainer runs a step's hooks in this order: ``on_step_end``, then ``on_log``, then (when due)
``on_evaluate`` and ``on_save``. The callback decides at ``on_step_end`` which of them will come;
once the step's logs are in, the monitors see its figures (`StepPipeline.check`), and after the
last hook the pipeline finishes the step, so the report carries the step's loss, its
evaluation and its save time. A directive that arrives before the save check (in ``on_log`` or
``on_evaluate``), a tripped monitor's included, can still ask for a save at the same step.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.core.reports import MonitorPause, SnapshotReport
from akka_training.engines.context import JobContext
from akka_training.engines.flops import mfu
from akka_training.engines.memory import StepMemory
from akka_training.engines.snapshots import upload_snapshot
from akka_training.engines.step_pipeline import (
    FinishedStep,
    StepPipeline,
    StepSpan,
    nothing_scored,
)
from akka_training.rewards.rollouts import Rollout
from akka_training.rewards.scoring import ScoreStats
from akka_training.telemetry import catalog as names
from akka_training.telemetry.tracing import RecordedSpan


@dataclass
class StepOutput:
    """What the engine's own part hands over at a step's end: the spans of the step's phases
    (under its span), its rollouts and what scoring them cost."""

    phases: list[RecordedSpan] = field(default_factory=list)
    rollouts: Sequence[Rollout] = ()
    scoring: ScoreStats = field(default_factory=nothing_scored)


class EngineFigures(Protocol):
    """The engine's own part of a step. `step_figures`: its figures, from the Trainer's logs
    of that step; they must hold ``tokens`` (tokens processed). When they hold
    ``timing/generation`` or ``timing/reward``, the rest of the step is reported as
    ``timing/update``, and MFU is measured over it. `step_output`: what else it hands over
    once the step ended (at `ended`, `time.time()` seconds)."""

    def step_figures(
        self, step: int, logs: dict[str, float], state: TrainerState
    ) -> dict[str, float]: ...

    def step_output(self, step: int, ended: float) -> StepOutput: ...


class StepReporting(TrainerCallback):
    def __init__(
        self,
        job: JobContext,
        engine: EngineFigures,
        memory: StepMemory,
        pipeline: StepPipeline,
        *,
        flop_parameters: int,
        peak_flops: float | None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`pipeline`: what each step owes once it trained; its monitors (reinforcement runs)
        that trip save a snapshot at the step and stop, as a pause with ``--checkpoint save``
        does. `clock`: the time a step's timings count."""
        self.job = job
        self.engine = engine
        self.memory = memory
        self.pipeline = pipeline
        self.total_steps = pipeline.total_steps
        self.flop_parameters = flop_parameters
        self.peak_flops = peak_flops
        self.clock = clock
        # Spans under the current step's span (its evaluation, its snapshot save).
        self._children: list[RecordedSpan] = []
        self.save_every = job.spec.settings.execution.save_every
        self.stopped = False
        self.last: dict[str, float] = {}
        self._ready = clock.monotonic()
        self._wall_ready = time.time()
        self._pending: set[str] = set()
        self._figures: dict[str, float] = {}
        self._logs: dict[str, float] = {}
        self._hook_done = clock.monotonic()
        self._stop_after_save = False
        self._state: TrainerState | None = None
        self._snapshot: SnapshotReport | None = None
        # The engine's figures of the step in progress, once its hooks are done.
        self._engine_figures: dict[str, float] | None = None
        self._pause: MonitorPause | None = None
        # The last step's length, from its beginning to its end hook: the next one's expected.
        self._expected: float | None = None

    # --- the Trainer's hooks ------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.pipeline.begin()
        self._begin_step()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        now = self.clock.monotonic()
        self._state = state
        step_seconds = now - self._ready
        model: torch.nn.Module = kwargs["model"]
        self._figures = {"timing/step": step_seconds}
        self._figures |= self.memory.figures(model, kwargs.get("optimizer"))
        self._logs = {}
        # A pause asked for during this step saves at its end: the directive as the service
        # answered it during the step (asked shortly before its expected end).
        self.job.reporter.step_ended()
        self._expected = step_seconds
        action = self.job.reporter.action
        if action == "stop":
            control.should_training_stop = True
            self.stopped = state.global_step < self.total_steps
        elif action == "save-and-stop":
            control.should_save = True
            self._stop_after_save = True
        elif state.global_step % self.save_every == 0:
            control.should_save = True
        self._pending = {"log"}
        if control.should_evaluate:
            self._pending.add("evaluate")
        if control.should_save:
            self._pending.add("save")
        self._hook_done = now

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if "log" not in self._pending or logs is None or "loss" not in logs:
            return
        self._logs |= logs
        self._hook_done = self.clock.monotonic()
        self._done("log", control)

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if "evaluate" not in self._pending:
            return
        metrics = metrics or {}
        if "eval_loss" in metrics:
            self._figures["eval_loss"] = float(metrics["eval_loss"])
        if "eval_runtime" in metrics:
            runtime = float(metrics["eval_runtime"])
            self._figures["timing/evaluation"] = runtime
            ended = time.time()
            self._children.append(
                RecordedSpan(
                    names.PREFIX + "job.evaluation",
                    ended - runtime,
                    ended,
                    {names.STEP: state.global_step},
                )
            )
        self._hook_done = self.clock.monotonic()
        self._done("evaluate", control)

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if "save" not in self._pending:
            return
        checkpoint = Path(str(args.output_dir)) / f"checkpoint-{state.global_step}"
        step = state.global_step
        began = time.time()
        report = upload_snapshot(self.job.store, self.job.snapshot_keys(step), step, checkpoint)
        self._snapshot = report
        _remove_older(checkpoint)
        self._figures["timing/save"] = self.clock.monotonic() - self._hook_done
        attributes: dict[str, str | int] = {names.STEP: step, names.SNAPSHOT: report.name}
        self._children.append(
            RecordedSpan(names.PREFIX + "job.snapshot.save", began, time.time(), attributes)
        )
        self._done("save", control)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._pending:
            self._flush(control)

    # --- internals -------------------------------------------------------------------------

    def _done(self, hook: str, control: TrainerControl) -> None:
        self._pending.discard(hook)
        if self._pending:
            return
        self._watch()
        if self.job.reporter.action == "save-and-stop" and not self._stop_after_save:
            # The directive came with this step's report answers: save now, report after.
            self._stop_after_save = True
            if self._snapshot is None:
                control.should_save = True
                self._pending.add("save")
                return
            # This step's snapshot is taken already (a `saveEvery` step whose save came before
            # the directive): the Trainer has passed its save, so asking for another would save
            # during the next step, and this step would never be reported.
        self._flush(control)

    def _flush(self, control: TrainerControl) -> None:
        state = self._state
        assert state is not None, "a step is flushed only after on_step_end"
        self._watch()
        figures = {**self._figures, **(self._engine_figures or {})}
        self._engine_figures = None
        tokens = figures.get("tokens", 0.0)
        step_seconds = figures["timing/step"]
        if "timing/generation" in figures or "timing/reward" in figures:
            # A reinforcement step: the update is what generation and scoring leave.
            figures["timing/update"] = max(
                0.0,
                step_seconds
                - figures.get("timing/generation", 0.0)
                - figures.get("timing/reward", 0.0),
            )
        if step_seconds > 0 and tokens:
            figures["tokens_per_second"] = tokens / step_seconds
        update_seconds = figures.get("timing/update", step_seconds)
        utilisation = mfu(self.flop_parameters, int(tokens), update_seconds, self.peak_flops)
        if utilisation is not None:
            figures["mfu"] = utilisation
        figures = {k: float(v) for k, v in figures.items() if v is not None}
        self.last = figures
        step = state.global_step
        ended = time.time()
        output = self.engine.step_output(step, ended)
        action = self.pipeline.finish(
            FinishedStep(
                step=step,
                figures=figures,
                pause=self._pause,
                span=StepSpan(self._wall_ready, ended, [*output.phases, *self._children]),
                rollouts=output.rollouts,
                scoring=output.scoring,
                snapshot=self._snapshot,  # uploaded in on_save; reported after its step
            )
        )
        self._pause = None
        self._snapshot = None
        self._children = []
        self._pending = set()
        if self._stop_after_save or action == "stop":
            # Told to stop at the last step, the run has finished all the same.
            control.should_training_stop = True
            self.stopped = step < self.total_steps
        self._begin_step()

    def _watch(self) -> None:
        """Gather the engine's figures of the step (once) and let the monitors see them. A
        monitor that trips asks for a save-and-stop: the snapshot is taken at this step (or
        was, at a ``saveEvery`` step) and the step's report carries the reason."""
        state = self._state
        if self._engine_figures is not None or state is None:
            return
        self._engine_figures = self.engine.step_figures(state.global_step, self._logs, state)
        health, self._pause = self.pipeline.check(state.global_step, self._engine_figures)
        self._engine_figures |= health
        if self._pause is not None and self._snapshot is not None:
            self._stop_after_save = True  # this step's snapshot is taken already

    def _begin_step(self) -> None:
        self.memory.begin()
        self._ready = self.clock.monotonic()
        self._wall_ready = time.time()
        self.job.reporter.step_began(self._expected)


def _remove_older(checkpoint: Path) -> None:
    """Keep only the newest local checkpoint: every snapshot is in the blob store."""
    for sibling in checkpoint.parent.glob("checkpoint-*"):
        if sibling != checkpoint and sibling.is_dir():
            shutil.rmtree(sibling, ignore_errors=True)
