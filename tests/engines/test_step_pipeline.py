"""The step pipeline: what every engine's step owes once it trained, in one order, with the
parts a job lacks as null objects, and a directive only the reporter changes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from akka_training.blobstore import LocalBlobStore
from akka_training.core.clock import ManualClock
from akka_training.core.reports import Action, MonitorPause, SnapshotReport, StepReport
from akka_training.engines.context import JobContext
from akka_training.engines.failures import Diverged, classify_failure
from akka_training.engines.reporter import HttpReporter
from akka_training.engines.step_pipeline import FinishedStep, StepPipeline, StepSpan
from akka_training.rewards.rollouts import Rollout
from akka_training.rewards.scoring import ScoreStats
from akka_training.telemetry import catalog as names
from akka_training.telemetry.tracing import RecordedSpan
from tests.engines.conftest import ReportServer
from tests.engines.jobs import make_spec, put_dataset
from tests.engines.rows import chat_rows

PAUSE = MonitorPause(
    monitor="answer-collapse",
    figure="health/distinct_answers/step",
    value=0.25,
    threshold=0.3,
    step=2,
    reason="The answer-collapse monitor paused the run at step 2",
)


class Recorder:
    """Every part of a pipeline at once, writing down each call in the order it came."""

    def __init__(self, monitor_trips: bool = False) -> None:
        self.calls: list[str] = []
        self.monitor_trips = monitor_trips
        self._action: Action = "continue"

    # the reporter
    @property
    def action(self) -> Action:
        return self._action

    def report_step(self, report: StepReport) -> None:
        self.calls.append(f"report step {report.step} pause={report.pause is not None}")

    def snapshot(self, report: SnapshotReport) -> None:
        self.calls.append(f"report snapshot {report.step}")

    def direct(self, action: Action) -> None:
        self.calls.append(f"direct {action}")
        self._action = action

    # the monitors
    def observe(
        self, step: int, figures: Mapping[str, float]
    ) -> tuple[dict[str, float], MonitorPause | None]:
        self.calls.append(f"monitors see step {step}")
        return {"health/distinct_answers/step": 0.25}, PAUSE if self.monitor_trips else None

    # the telemetry
    def training(self, kind: str) -> None:
        self.calls.append(f"telemetry training {kind}")

    def stalled(self, is_stalled: bool) -> None:
        self.calls.append(f"telemetry stalled {is_stalled}")

    def step(self, kind: str, step: int, figures: Mapping[str, float]) -> None:
        self.calls.append(f"telemetry step {step}")

    def reward_stats(self, **accounting: Any) -> None:
        self.calls.append(f"telemetry reward stats {sorted(accounting['timings'])}")

    def histograms(self, values_by_name: Mapping[str, Sequence[float]]) -> None:
        self.calls.append(f"telemetry histograms {sorted(values_by_name)}")

    # the rollout files
    def submit(self, step: int, rollouts: Sequence[Rollout]) -> None:
        self.calls.append(f"rollouts of step {step}: {len(rollouts)}")

    def wait(self) -> None:
        self.calls.append("rollouts stored")

    # the watchdog
    def arm(self) -> None:
        self.calls.append("watchdog armed")

    def progress(self) -> None:
        self.calls.append("watchdog progress")

    # the tracing
    def record(
        self,
        name: str,
        start_s: float,
        end_s: float,
        attributes: Mapping[str, Any] | None = None,
        *,
        children: Sequence[RecordedSpan] = (),
    ) -> None:
        self.calls.append(f"span {name} {dict(attributes or {})} {[c.name for c in children]}")


def pipeline_of(recorder: Recorder) -> StepPipeline:
    return StepPipeline(
        reporter=recorder,
        kind="rl",
        total_steps=4,
        monitors=recorder,
        rollouts=recorder,
        telemetry=recorder,
        tracing=recorder,
        watchdog=recorder,
        started_at=100.0,
    )


def rollout(step: int, index: int) -> Rollout:
    return Rollout(
        step=step,
        index=index,
        group=0,
        prompt="2 + 2?",
        completion="#### 4",
        expected="4",
        score=1.0,
        shares={"correct": 1.0},
        values={"correct": 1.0},
        completion_tokens=3,
        finish_reason="stop",
        weights={"correct": 1.0},
    )


def test_a_step_owes_its_parts_in_one_order() -> None:
    recorder = Recorder()
    pipeline = pipeline_of(recorder)
    pipeline.begin()
    health, pause = pipeline.check(2, {"reward/mean": 1.0})
    generation = RecordedSpan(names.PREFIX + "rl.generation", 101.0, 102.0, {names.STEP: 2})
    action = pipeline.finish(
        FinishedStep(
            step=2,
            figures={"reward/mean": 1.0, **health},
            pause=pause,
            span=StepSpan(100.5, 103.0, [generation]),
            rollouts=[rollout(2, 0), rollout(2, 1)],
            scoring=ScoreStats(
                seconds={"correct": [0.1, 0.1]},
                failures={},
                judge_prompt_tokens={},
                judge_completion_tokens={},
                wall_seconds=0.2,
            ),
            snapshot=SnapshotReport(name="step-2", step=2, weights="runs/r/snapshots/step-2/"),
        )
    )
    assert action == "continue"
    assert recorder.calls == [
        # training begins
        f"span {names.PREFIX}job.prepare {{}} []",
        "telemetry training rl",
        "watchdog armed",
        # 1. the monitors see the step, before the engine decides whether it saves
        "monitors see step 2",
        # 2. to 7. once it trained (and saved)
        "report step 2 pause=False",
        "telemetry step 2",
        "telemetry reward stats ['correct']",
        "telemetry histograms ['completion_length', 'reward', 'reward/correct']",
        "rollouts of step 2: 2",
        "rollouts stored",  # before the snapshot that follows them is reported
        "report snapshot 2",
        "watchdog progress",
        f"span {names.PREFIX}job.step {{'{names.STEP}': 2}} ['{names.PREFIX}rl.generation']",
    ]


def test_a_tripped_monitor_asks_for_a_save_and_its_step_report_carries_the_pause() -> None:
    recorder = Recorder(monitor_trips=True)
    pipeline = pipeline_of(recorder)
    health, pause = pipeline.check(2, {"reward/mean": 1.0})
    assert pause == PAUSE
    action = pipeline.finish(FinishedStep(step=2, figures=health, pause=pause))
    assert action == "save-and-stop"
    assert recorder.calls[:3] == [
        "monitors see step 2",
        "direct save-and-stop",
        "report step 2 pause=True",
    ]


@pytest.mark.parametrize(
    ("figure", "value", "shown"),
    [
        ("loss", math.nan, "NaN"),
        ("grad_norm", math.inf, "Infinity"),
        ("policy_loss", -math.inf, "-Infinity"),
    ],
)
def test_a_non_finite_loss_fails_the_run_after_its_step_is_reported(
    figure: str, value: float, shown: str
) -> None:
    recorder = Recorder()
    pipeline = pipeline_of(recorder)
    figures = {"loss": 1.5, figure: value}
    health, pause = pipeline.check(2, figures)
    assert pause is None
    with pytest.raises(Diverged) as raised:
        pipeline.finish(FinishedStep(step=2, figures={**figures, **health}))
    # The step, its NaN included, is reported before the run fails.
    assert "report step 2 pause=False" in recorder.calls
    reason, detail = classify_failure(raised.value, None)
    assert reason.value == "training-error"
    assert detail == (
        f"step 2: {figure} is {shown} (the run diverged; lower the learning rate, "
        "or start again from a snapshot taken before this step; "
        "config.monitors.pauseOn: [non-finite-loss] pauses a grpo or gspo run instead)"
    )


def test_a_non_finite_loss_pauses_the_run_when_pause_on_names_it() -> None:
    recorder = Recorder()
    pipeline = pipeline_of(recorder)
    pipeline.run, pipeline.pause_on_diverged = "run-1", True
    _health, pause = pipeline.check(3, {"loss": math.nan})
    assert pause is not None
    assert (pause.monitor, pause.figure, pause.step) == ("non-finite-loss", "loss", 3)
    assert pause.reason == (
        "The non-finite-loss monitor paused the run at step 3: loss was NaN (the run diverged). "
        "The snapshot of step 3 holds the diverged weights: list the earlier ones with "
        "`akka training runs snapshots run-1` and branch from one with a lower learning rate "
        "(`akka training runs branch run-1 --snapshot NAME --overrides changes.yaml`)."
    )
    action = pipeline.finish(FinishedStep(step=3, figures={"loss": math.nan}, pause=pause))
    assert action == "save-and-stop"
    assert recorder.calls[:3] == [
        "monitors see step 3",
        "direct save-and-stop",
        "report step 3 pause=True",
    ]


def test_finite_losses_go_on() -> None:
    pipeline = pipeline_of(Recorder())
    figures = {"loss": 1e30, "grad_norm": 0.0, "reward/min": math.nan}  # not a loss
    assert pipeline.finish(FinishedStep(step=1, figures=figures)) == "continue"


def test_a_monitor_that_trips_after_a_cancel_leaves_the_stop(report_server: ReportServer) -> None:
    # The service cancelled the run while the step trained; the monitor that trips at the
    # step's end asks for a pause: the run still stops, without saving.
    report_server.script = lambda kind, body, reports: "stop"
    clock = ManualClock()
    reporter = HttpReporter(
        report_server.url, "run-1", 1, "token", heartbeat_seconds=3600, clock=clock
    )
    try:
        reporter.refresh_action()
        recorder = Recorder(monitor_trips=True)
        pipeline = StepPipeline(reporter=reporter, kind="rl", total_steps=4, monitors=recorder)
        health, pause = pipeline.check(2, {})
        assert pipeline.finish(FinishedStep(step=2, figures=health, pause=pause)) == "stop"
        reporter.flush(timeout=30)
    finally:
        reporter.close()
    assert report_server.of("steps")[0]["pause"]["monitor"] == "answer-collapse"


def test_a_job_without_telemetry_spans_watchdog_or_monitors_reports_its_steps(
    catalog: dict[str, dict[str, Any]],
    report_server: ReportServer,
    store: LocalBlobStore,
    tmp_path: Path,
) -> None:
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "maths", chat_rows(4)),
        config={"method": "sft"},
        trainer_url=report_server.url,
        store=store,
    )
    reporter = HttpReporter(
        report_server.url, "run-1", 1, "token", heartbeat_seconds=3600, clock=ManualClock()
    )
    job = JobContext(spec=spec, reporter=reporter, store=store, workdir=tmp_path)
    try:
        pipeline = StepPipeline.for_job(job, "sft", total_steps=2)
        pipeline.begin()
        for step in (1, 2):
            health, pause = pipeline.check(step, {"loss": 1.0})
            assert (health, pause) == ({}, None)
            span = StepSpan(float(step), step + 0.5)
            action = pipeline.finish(
                FinishedStep(step=step, figures={"loss": 1.0}, pause=pause, span=span)
            )
            assert action == "continue"
        reporter.flush(timeout=30)
    finally:
        reporter.close()
    assert [(s["step"], s["metrics"]) for s in report_server.of("steps")] == [
        (1, {"loss": 1.0}),
        (2, {"loss": 1.0}),
    ]
