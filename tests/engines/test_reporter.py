"""The reporter tells its listeners (the job's telemetry) each new directive of the service."""

from __future__ import annotations

import time
from pathlib import Path

from akka_training.core.reports import StepReport
from akka_training.engines.reporter import HttpReporter
from akka_training.telemetry import catalog as c
from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.telemetry.otel import job_resource
from akka_training.testing.otlp_receiver import OtlpReceiver
from tests.engines.conftest import ReportServer


def test_a_pause_puts_the_job_s_phase_in_pausing(
    report_server: ReportServer, tmp_path: Path
) -> None:
    report_server.script = lambda kind, body, reports: (
        "save-and-stop" if kind == "steps" and body["step"] >= 2 else "continue"
    )
    heard: list[str] = []
    with OtlpReceiver() as receiver:
        telemetry = JobTelemetry(
            job_resource("run-1", 1, "maths"), receiver.endpoint, tmp_path, export_interval_s=3600
        )
        reporter = HttpReporter(report_server.url, "run-1", 1, "token", heartbeat_seconds=60)
        reporter.on_directive(heard.append)
        reporter.on_directive(telemetry.directive)
        try:
            telemetry.training("sft")
            for step in (1, 2, 3):
                reporter.report_step(StepReport(step=step, total_steps=4, metrics={}))
            reporter.flush(timeout=10)
            deadline = time.monotonic() + 5
            while not heard and time.monotonic() < deadline:
                time.sleep(0.02)
            assert telemetry.flush()
            phases = receiver.wait_for_metric(
                c.PREFIX + "job.phase", lambda r: r.point({c.RUN_PHASE: "PAUSING"}).value == 1
            )
        finally:
            reporter.close()
            telemetry.shutdown()
    assert heard == ["save-and-stop"]  # once, when it changed
    assert phases.point({c.RUN_PHASE: "TRAINING"}).value == 0


def test_a_step_s_end_takes_the_directive_asked_for_during_the_step(
    report_server: ReportServer,
) -> None:
    # The pause is asked for while the step trains: the question sent before the step's
    # expected end carries it, and the step's end asks nothing more.
    report_server.script = lambda kind, body, reports: (
        "save-and-stop" if kind == "heartbeat" else "continue"
    )
    reporter = HttpReporter(report_server.url, "run-1", 1, "token", heartbeat_seconds=60)
    try:
        reporter.step_began(0.05)
        time.sleep(0.5)  # the step trains past its expected end; the answer is in
        assert len(report_server.of("heartbeat")) == 1
        reporter.step_ended()
        assert reporter.action == "save-and-stop"
        assert len(report_server.of("heartbeat")) == 1
    finally:
        reporter.close()


def test_a_step_that_ends_before_its_question_was_sent_asks_at_its_end(
    report_server: ReportServer,
) -> None:
    report_server.script = lambda kind, body, reports: (
        "save-and-stop" if kind == "heartbeat" else "continue"
    )
    reporter = HttpReporter(report_server.url, "run-1", 1, "token", heartbeat_seconds=60)
    try:
        reporter.step_began(60.0)  # expected to run a minute; it ends at once
        reporter.step_ended()
        assert reporter.action == "save-and-stop"
        time.sleep(0.2)
        assert len(report_server.of("heartbeat")) == 1  # the look-ahead was called off
    finally:
        reporter.close()
