"""The reporter: the directive it holds and tells its listeners (the job's telemetry), the
directive a step's end obeys, and how step reports go to the service. The timing tests drive a
`ManualClock`: each advances the clock as training would and settles (the reporter's threads
have done what that set off) before it looks."""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from akka_training.core.clock import ManualClock
from akka_training.core.reports import RolloutsReport, SnapshotReport, StepReport
from akka_training.engines.reporter import HttpReporter
from akka_training.telemetry import catalog as c
from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.telemetry.otel import job_resource
from akka_training.testing.otlp_receiver import OtlpReceiver
from tests.engines.conftest import ReportServer

# The reporter's threads: the sender, the heartbeat and the directive's look-ahead.
REPORTER_THREADS = 3


def held_reporter(url: str, clock: ManualClock, **options: Any) -> HttpReporter:
    """A reporter on `clock` whose threads all wait, with no heartbeat within the tests."""
    options.setdefault("heartbeat_seconds", 3600)
    reporter = HttpReporter(url, "run-1", 1, "token", clock=clock, **options)
    clock.settle(threads=REPORTER_THREADS)
    return reporter


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
            reporter.flush(timeout=10)  # delivered, and the listeners heard the answers
            assert telemetry.flush()
            phases = receiver.wait_for_metric(
                c.PREFIX + "job.phase",
                lambda r: r.require_point({c.RUN_PHASE: "PAUSING"}).value == 1,
            )
        finally:
            reporter.close()
            telemetry.shutdown()
    assert heard == ["save-and-stop"]  # once, when it changed
    assert phases.require_point({c.RUN_PHASE: "TRAINING"}).value == 0


def test_a_stop_is_never_downgraded(report_server: ReportServer) -> None:
    # The service cancels the run (stop); the job's own save-and-stop (a health monitor that
    # trips, a SIGTERM), asked from another thread, must not turn it back into a pause.
    report_server.script = lambda kind, body, reports: "stop"
    reporter = HttpReporter(report_server.url, "run-1", 1, "token", heartbeat_seconds=60)
    heard: list[str] = []
    reporter.on_directive(heard.append)
    try:
        reporter.refresh_action()
        assert reporter.action == "stop"
        askers = [
            threading.Thread(target=reporter.direct, args=("save-and-stop",)) for _ in range(8)
        ]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join()
        reporter.direct("continue")
        assert reporter.action == "stop"
        # The directive changes through the reporter's own methods only.
        with pytest.raises(AttributeError):
            reporter.action = "save-and-stop"  # type: ignore[misc]
        assert reporter.action == "stop"
    finally:
        reporter.close()
    assert heard == ["stop"]


def action_now(reporter: HttpReporter) -> str:
    """The reporter's action when called: what another call may have changed since an earlier
    assertion on it (which a type checker takes to hold still)."""
    return reporter.action


def test_a_pause_asked_by_the_job_is_strengthened_by_a_cancel(report_server: ReportServer) -> None:
    cancelled = threading.Event()
    report_server.script = lambda kind, body, reports: "stop" if cancelled.is_set() else "continue"
    reporter = HttpReporter(report_server.url, "run-1", 1, "token", heartbeat_seconds=60)
    heard: list[str] = []
    reporter.on_directive(heard.append)
    try:
        reporter.direct("save-and-stop")  # a monitor tripped
        reporter.refresh_action()  # the service says continue: the pause holds
        assert reporter.action == "save-and-stop"
        cancelled.set()
        reporter.refresh_action()
        assert action_now(reporter) == "stop"
    finally:
        reporter.close()
    assert heard == ["save-and-stop", "stop"]


def test_a_step_s_end_takes_the_directive_asked_for_during_the_step(
    report_server: ReportServer,
) -> None:
    # The pause is asked for while the step trains: the question sent before the step's
    # expected end carries it, and the step's end asks nothing more.
    report_server.script = lambda kind, body, reports: (
        "save-and-stop" if kind == "heartbeat" else "continue"
    )
    clock = ManualClock()
    reporter = held_reporter(report_server.url, clock)
    try:
        reporter.step_began(0.05)
        clock.advance(0.5)  # the step trains past its expected end
        clock.settle()  # the look-ahead asked, and has its answer
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
    clock = ManualClock()
    reporter = held_reporter(report_server.url, clock)
    try:
        reporter.step_began(60.0)  # expected to run a minute; it ends at once
        reporter.step_ended()
        assert reporter.action == "save-and-stop"
        clock.advance(120.0)
        clock.settle()
        assert len(report_server.of("heartbeat")) == 1  # the look-ahead was called off
    finally:
        reporter.close()


def _sent(report_server: ReportServer) -> list[str]:
    """The step requests as they came: ``steps`` (one step) or ``batch`` (several)."""
    with report_server.lock:
        return [k for k in report_server.requests if k in ("steps", "batch")]


def test_short_steps_go_in_few_requests_every_step_once_in_order_with_its_age(
    report_server: ReportServer,
) -> None:
    clock = ManualClock()
    reporter = held_reporter(report_server.url, clock, report_seconds=0.5)
    try:
        for step in range(1, 21):  # a step every 0.0625 s for a little over a second
            reporter.report_step(StepReport(step=step, total_steps=20, metrics={"loss": 1.0}))
            clock.settle()
            clock.advance(0.0625)
            clock.settle()
        reporter.flush(timeout=10)
    finally:
        reporter.close()
    steps = report_server.of("steps")
    assert [s["step"] for s in steps] == list(range(1, 21))
    # The first step goes at once, the next ones every half second, as one request.
    assert _sent(report_server) == ["steps", "batch", "batch", "batch"]
    # Each step says how long it waited: within a request the earlier steps waited longer
    # (the second request went at 0.5 s with steps 2 to 8; step 9 came then, and waited).
    ages = [s["ago"] for s in steps]
    assert ages[:9] == [0.0, 0.4375, 0.375, 0.3125, 0.25, 0.1875, 0.125, 0.0625, 0.5]


def test_steps_longer_than_the_interval_each_go_on_their_own_at_once(
    report_server: ReportServer,
) -> None:
    clock = ManualClock()
    reporter = held_reporter(report_server.url, clock, report_seconds=0.05)
    try:
        for step in range(1, 5):
            reporter.report_step(StepReport(step=step, total_steps=4, metrics={}))
            clock.settle()
            assert len(report_server.of("steps")) == step  # there before the next step ends
            clock.advance(0.25)
            clock.settle()
    finally:
        reporter.close()
    assert _sent(report_server) == ["steps"] * 4
    assert [s["ago"] for s in report_server.of("steps")] == [0.0] * 4


def test_a_job_of_short_steps_asks_about_once_an_interval_and_obeys_a_pause_within_it(
    report_server: ReportServer,
) -> None:
    paused = threading.Event()
    report_server.script = lambda kind, body, reports: (
        "save-and-stop" if paused.is_set() else "continue"
    )
    clock = ManualClock()
    reporter = held_reporter(report_server.url, clock, report_seconds=0.3)
    asked_at = obeyed_at = None
    step = 0
    try:
        expected = None
        while step < 500:  # a step of 0.02 s, as a training loop runs them
            step += 1
            began = clock.monotonic()
            reporter.step_began(expected)
            clock.advance(0.02)
            clock.settle()
            reporter.step_ended()
            expected = clock.monotonic() - began
            reporter.report_step(StepReport(step=step, total_steps=500, metrics={}))
            clock.settle()
            if reporter.action == "save-and-stop":
                obeyed_at = clock.monotonic()
                break
            if step == 40:
                paused.set()
                asked_at = clock.monotonic()
        reporter.flush(timeout=10)
    finally:
        reporter.close()
    assert asked_at is not None and obeyed_at is not None, "the pause was never obeyed"
    # Obeyed at the end of the step in progress once an answer came: within an interval.
    assert obeyed_at - asked_at <= 0.3 + 0.02
    with report_server.lock:
        requests = len(report_server.requests)
    assert requests < step / 3, (requests, step)  # not a question and a report every step
    assert [s["step"] for s in report_server.of("steps")] == list(range(1, step + 1))


def test_rollout_and_snapshot_reports_go_with_the_steps_in_the_order_they_came(
    report_server: ReportServer,
) -> None:
    clock = ManualClock()
    reporter = held_reporter(report_server.url, clock, report_seconds=0.5)
    try:
        for step in range(1, 11):  # a reinforcement step every 0.03 s: its step, its rollouts
            reporter.report_step(StepReport(step=step, total_steps=10, metrics={}))
            reporter.rollouts(RolloutsReport(step=step, blob=f"r/{step}.parquet", count=8))
            if step % 5 == 0:
                reporter.snapshot(
                    SnapshotReport(name=f"step-{step}", step=step, weights=f"s/{step}/")
                )
            clock.settle()
            clock.advance(0.03)
            clock.settle()
        reporter.flush(timeout=10)
    finally:
        reporter.close()
    expected = []
    for step in range(1, 11):
        expected += ["steps", "rollouts"] + (["snapshots"] if step % 5 == 0 else [])
    assert report_server.kinds() == expected
    assert [r["step"] for r in report_server.of("rollouts")] == list(range(1, 11))
    with report_server.lock:
        requests = list(report_server.requests)
    assert requests == ["steps", "batch"]


@pytest.fixture
def hanging_service() -> Iterator[tuple[str, list[socket.socket]]]:
    """A service that takes connections and never answers (stopped, or its database held):
    its URL, and the connections it took."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    taken: list[socket.socket] = []

    def take() -> None:
        while True:
            try:
                taken.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=take, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", taken
    finally:
        server.close()
        for connection in taken:
            connection.close()


def test_steps_do_not_wait_on_a_service_that_hangs(
    hanging_service: tuple[str, list[socket.socket]],
) -> None:
    # The first step's end asks and waits for its question (two seconds); from then on the
    # steps' ends wait for none and ask nothing: only the look-ahead asks, from its thread.
    url, taken = hanging_service
    clock = ManualClock()
    reporter = held_reporter(url, clock, report_seconds=0)
    try:
        expected = None
        for _ in range(10):
            began = clock.monotonic()
            reporter.step_began(expected)
            clock.advance(0.05)
            reporter.step_ended()
            expected = clock.monotonic() - began
        assert reporter.action == "continue"
        # The clock moved only with the steps: no step's end waited for an answer on it.
        assert clock.monotonic() == pytest.approx(0.5)
        # The first step's end asked once, the look-ahead of the second step once.
        assert len(taken) <= 2
    finally:
        reporter.close()


def test_a_non_finite_figure_goes_as_its_text_and_the_reports_after_it_go_too(
    report_server: ReportServer,
) -> None:
    # JSON has no NaN: a diverging run's loss goes as "NaN", and the reporting goes on.
    reporter = HttpReporter(report_server.url, "run-1", 1, "token", heartbeat_seconds=60)
    try:
        figures = {"loss": math.nan, "grad_norm": math.inf, "reward/min": -math.inf}
        reporter.report_step(StepReport(step=1, total_steps=2, metrics=figures))
        reporter.report_step(StepReport(step=2, total_steps=2, metrics={"loss": 1.0}))
        reporter.flush(timeout=10)
    finally:
        reporter.close()
    first, second = report_server.of("steps")
    assert first["metrics"] == {"loss": "NaN", "grad_norm": "Infinity", "reward/min": "-Infinity"}
    assert second["metrics"] == {"loss": 1.0}
    # The service reads the texts back as the numbers they name.
    assert math.isnan(StepReport.model_validate(first).metrics["loss"])
