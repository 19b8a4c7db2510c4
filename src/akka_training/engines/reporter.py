"""How a training job reports to the service.

`HttpReporter` posts reports in order from one background thread, so a step never waits for
the network. When the service does not answer (it is restarting), reports wait in the queue and
are retried with back-off for up to `patience` seconds; the job keeps training meanwhile. The
final report (finished, stopped, failed) is sent synchronously after the queue has drained.

Step, rollout and snapshot reports go at most once every `report_seconds`
(``trainer.controller.report-seconds``, a second by default): one that comes sooner after
the last ones sent waits, and the reports that queued meanwhile go as one ``batch`` report,
before any report of another kind, so the service takes every report once and in order. Each
step report carries its age (`StepReport.ago`), so the service records the step at the time it
ended. When steps take longer than that, each report goes at once, on its own.

Each answer carries a directive (`core.reports.Action`); `action` holds the strongest one so
far, which the training loop reads after every optimizer step. The reporter alone changes it,
under its lock, and only ever to a stronger one (``stop`` over ``save-and-stop`` over
``continue``): the service's answers, a 409, the job's own asks (`direct`: SIGTERM, a health
monitor that trips) come from different threads, and none of them may undo a ``stop``.

The directive a step's end obeys was asked for during that step: `step_began` has a thread of
the reporter ask for it shortly before the step is expected to end (the previous step's
length, less twice the last answer's round trip), so `step_ended` finds the answer waiting
and the training thread does not wait for the network. When the step ended before that
question was sent, `step_ended` asks at once. A step shorter than `report_seconds` takes any
answer to a request sent within its last `report_seconds` as the directive, and its look-ahead
asks only when there is none; the reports waiting to go are then the question (they go at
once), so a job whose steps are short sends about one request every `report_seconds`
rather than two at every step. A pause reaches such a job at most about `report_seconds`
after it was asked, and is obeyed at the end of the step then in progress.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import httpx

from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.core.figures import json_safe
from akka_training.core.reports import (
    ACTION_RANK,
    BATCH_LIMIT,
    BATCHED_KINDS,
    REPORT_SECONDS,
    Action,
    FailedReport,
    FinishedReport,
    HeartbeatReport,
    Placement,
    RolloutsReport,
    SnapshotReport,
    StartedReport,
    StepReport,
    StoppedReport,
    TrainingReport,
)

log = logging.getLogger(__name__)

# A report waiting to be sent: its kind, its body, and when it was queued.
_Queued = tuple[str, dict[str, Any], float]


class StaleAttempt(Exception):
    """The service no longer counts this attempt as the run's current one: stop."""


class ReportNotDelivered(Exception):
    pass


class ReporterDied(Exception):
    """A thread of the reporter raised: the job can no longer tell the service how it goes,
    and ends itself (`HttpReporter.check`) rather than train on unseen."""


def deliver(
    client: httpx.Client,
    url: str,
    kind: str,
    body: dict[str, Any],
    patience: float,
    clock: Clock = SYSTEM_CLOCK,
) -> httpx.Response:
    """POST a report until the service takes it, and return the service's answer: one below
    300, or a 409 (the sender is no longer the one the service knows). Connection errors and
    5xx answers are retried with back-off for `patience` seconds of `clock`; a refusal, a
    request that cannot be sent, or spent patience raise `ReportNotDelivered`. A figure that is
    not finite (a NaN loss) goes as its text (`core.figures.json_safe`)."""
    body = json_safe(body)
    deadline = clock.monotonic() + patience
    delay = 0.2
    while True:
        try:
            response = client.post(url, json=body)
        except (httpx.LocalProtocolError, httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            # A request the sender cannot even send (a bad token or URL) will not get better.
            raise ReportNotDelivered(f"the {kind} report cannot be sent: {exc}") from exc
        except httpx.HTTPError as exc:
            error: str = str(exc) or type(exc).__name__
        else:
            if response.status_code == 409 or response.status_code < 300:
                return response
            if response.status_code < 500:
                raise ReportNotDelivered(
                    f"the service refused the {kind} report: HTTP {response.status_code} "
                    f"{response.text[:500]}"
                )
            error = f"HTTP {response.status_code}"
        if clock.monotonic() > deadline:
            raise ReportNotDelivered(f"the service did not take the {kind} report: {error}")
        clock.sleep(delay)
        delay = min(delay * 2, 5.0)


class HttpReporter:
    def __init__(
        self,
        trainer_url: str,
        run_id: str,
        attempt: int,
        token: str,
        *,
        patience: float = 900.0,
        heartbeat_seconds: float = 5.0,
        report_seconds: float = REPORT_SECONDS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`clock`: the time every wait, retry and look-ahead counts (tests hold one)."""
        self._clock = clock
        self._base = f"{trainer_url.rstrip('/')}/v1/jobs/{run_id}/attempts/{attempt}"
        self._client = httpx.Client(
            headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(30.0)
        )
        self._patience = patience
        self._report_seconds = report_seconds
        # None ends the sending thread.
        self._queue = _Outbox(clock)
        self._lock = threading.Lock()
        self._action: Action = "continue"
        self.stale = False
        self.step: int | None = None
        self.stall_dump: str | None = None
        self._listeners: list[Callable[[Action], None]] = []
        self._closed = clock.event()
        self._heartbeat_seconds = heartbeat_seconds
        # The directive's look-ahead (see the module's docstring), guarded by `_ahead`.
        self._ahead = clock.condition()
        self._step_began = 0.0
        self._ask_at: float | None = None
        self._asking_since: float | None = None
        self._answered_since = -1.0
        # When the latest answer of any request (a report, a heartbeat) was asked for.
        self._last_asked = float("-inf")
        self._expected_end: float | None = None
        self._scheduled_with = float("-inf")  # `_last_asked` when the look-ahead was set
        # Reports wait in the sending thread for their turn (none is being sent).
        self._reports_waiting = False
        # The service left the latest question unanswered (it hangs): a step's end does not
        # wait for the next one, the reporter's threads still ask.
        self._silent = False
        self._round_trip = 0.0
        # What killed one of the reporter's threads (None: they live); see `check`.
        self.died: ReporterDied | None = None
        self._sender = self._thread(self._send_loop, "akka-reporter")
        self._beater = self._thread(self._beat_loop, "akka-heartbeat")
        self._asker = self._thread(self._ask_loop, "akka-directive")
        for thread in (self._sender, self._beater, self._asker):
            thread.start()

    @property
    def action(self) -> Action:
        """The directive to obey: the strongest the service (or the job itself) gave so far."""
        return self._action

    def check(self) -> None:
        """Raise `ReporterDied` when a thread of the reporter died: the job's entry point
        calls it when the engine returns, so that the job reports its failure and exits
        rather than living on with nobody hearing of its steps."""
        if self.died is not None:
            raise self.died

    def on_directive(self, listener: Callable[[Action], None]) -> None:
        """Call `listener` with each new directive (from the reporting thread)."""
        self._listeners.append(listener)

    # --- reports, in the order a job sends them ---------------------------------------------

    def started(self, placement: Placement) -> None:
        self._enqueue("started", StartedReport(placement=placement).to_json())

    def training(self, report: TrainingReport) -> None:
        self._enqueue("training", report.to_json())

    def report_step(self, report: StepReport) -> None:
        self.step = report.step
        self._enqueue("steps", report.to_json())

    def snapshot(self, report: SnapshotReport) -> None:
        self._enqueue("snapshots", report.to_json())

    def rollouts(self, report: RolloutsReport) -> None:
        self._enqueue("rollouts", report.to_json())

    def finished(self, report: FinishedReport) -> None:
        self._final("finished", report.to_json())

    def stopped(self, report: StoppedReport) -> None:
        self._final("stopped", report.to_json())

    def failed(self, report: FailedReport) -> None:
        self._final("failed", report.to_json())

    def refresh_action(self, timeout: float = 2.0) -> None:
        """Ask the service for its directive now (a heartbeat, sent at once), so that a pause
        requested during a step is seen at the end of that step rather than at the next
        background heartbeat. A service that does not answer in `timeout` leaves `action` as
        it was: the background heartbeat and the step reports still carry the directive."""
        if self.stale or self._closed.is_set():
            return
        asked = self._clock.monotonic()
        if self._ask(asked, timeout):
            with self._ahead:
                self._round_trip = self._clock.monotonic() - asked
        else:
            self._silent = True

    def step_began(self, expected_seconds: float | None) -> None:
        """A training step began: ask for the directive from the reporter's thread shortly
        before the step is expected to end, `expected_seconds` from now (None: not known, the
        step's end asks)."""
        with self._ahead:
            self._step_began = self._clock.monotonic()
            if expected_seconds is None:
                self._ask_at = self._expected_end = None
                return
            lead = max(2 * self._round_trip, 0.002)
            self._expected_end = self._step_began + expected_seconds
            ask_at = self._expected_end
            self._scheduled_with = self._last_asked
            if expected_seconds < self._report_seconds:
                # A short step takes a recent answer: ask only once the latest is too old.
                ask_at = max(ask_at, self._last_asked + self._report_seconds)
            self._ask_at = max(self._step_began, ask_at - lead)
            self._ahead.notify_all()

    def step_ended(self, timeout: float = 2.0) -> None:
        """The step ended: make `action` the directive as the service answered it during the
        step (a step shorter than `report_seconds`: within its last `report_seconds`). An
        answer to a question asked since then is taken as it is (waiting up to `timeout` for
        a question on its way); without one, the service is asked now (`refresh_action`).
        While the service leaves questions unanswered, the step's end waits for none: the
        directive stays as it was until an answer comes."""
        if self._silent:
            with self._ahead:
                self._ask_at = self._expected_end = None
            return
        ended = self._clock.monotonic()
        deadline = ended + timeout
        with self._ahead:
            self._ask_at = self._expected_end = None
            began = self._step_began
            short = ended - began < self._report_seconds
            since = ended - self._report_seconds if short else began

            def answered() -> bool:
                # A long step takes only its look-ahead's answer, asked shortly before its end.
                return (self._last_asked if short else self._answered_since) >= since

            while (
                not answered()
                and self._asking_since is not None
                and self._asking_since >= since
                and not self._closed.is_set()
            ):
                left = deadline - self._clock.monotonic()
                if left <= 0:
                    return  # as refresh_action: the heartbeats and step reports still carry it
                self._ahead.wait(left)
            if answered():
                return
        self.refresh_action(timeout=timeout)

    def direct(self, action: Action) -> None:
        """Take `action` as if the service had answered it: the job's own SIGTERM handler and a
        health monitor that trips ask for a save-and-stop. A weaker directive than the one
        held changes nothing (a stop stays a stop)."""
        self._take(action)

    def terminated(self) -> None:
        """The job was sent SIGTERM: ask the service first (a cancel or a pause answers
        ``stop``), and save and stop when it says nothing more, so that a job stopped from
        outside (a node drained, a kill) resumes from a snapshot of its last step. It returns
        at once: the asking runs in a thread, as it may come from a signal handler."""

        def ask() -> None:
            self.refresh_action()
            self.direct("save-and-stop")

        threading.Thread(target=ask, name="akka-sigterm", daemon=True).start()

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued report was delivered (or given up)."""
        self._queue.put(_SEND_NOW)  # reports waiting for their turn go now
        if not self._queue.drained(timeout):
            raise ReportNotDelivered("reports still queued")
        self.check()

    def close(self) -> None:
        self._closed.set()
        with self._ahead:
            self._ahead.notify_all()
        self._queue.put(None)
        self._sender.join(timeout=5)
        self._client.close()

    # --- internals ---------------------------------------------------------------------------

    def _enqueue(self, kind: str, body: dict[str, Any]) -> None:
        if self.stale:
            raise StaleAttempt("this attempt is no longer the run's current one")
        self._queue.put((kind, body, self._clock.monotonic()))

    def _final(self, kind: str, body: dict[str, Any]) -> None:
        if self.died is None:  # with its sender dead, the queue never drains: go on at once
            self.flush(timeout=self._patience)
        self._closed.set()
        with self._ahead:
            self._ask_at = None  # no question after the end report
            self._ahead.notify_all()
        if not self.stale:
            self._post(kind, body)

    def _thread(self, loop: Callable[[], None], name: str) -> threading.Thread:
        """A thread of the reporter running `loop`: should `loop` raise, the reporter keeps
        what it raised (`check`) and holds a ``stop``, so the training loop stops at the end
        of its step and the job ends itself (the service would otherwise see a live job that
        reports nothing, stalled for ever)."""

        def guarded() -> None:
            try:
                loop()
            except BaseException as exc:
                log.exception("the job's reporter failed in its thread %s", name)
                self.died = ReporterDied(
                    f"the job's reporting thread failed ({type(exc).__name__}: {exc}), so the "
                    "trainer could no longer hear of its steps; the job ended itself"
                    + ("" if self.step is None else f" after step {self.step}")
                )
                self._queue.abandon()  # nobody sends them now: a flush waits for none
                self._take("stop")

        return threading.Thread(target=guarded, name=name, daemon=True)

    def _send_loop(self) -> None:
        waiting: list[_Queued] = []  # step, rollout and snapshot reports to go as one
        last_sent = float("-inf")
        while True:
            if waiting:
                wait = last_sent + self._report_seconds - self._clock.monotonic()
                try:
                    item = self._queue.get(timeout=max(0.0, wait))
                except queue.Empty:
                    last_sent = self._send_waiting(waiting)
                    continue
            else:
                item = self._queue.get(timeout=None)
            if item is not None and item[0] in BATCHED_KINDS:
                waiting.append(item)
                if self._clock.monotonic() >= last_sent + self._report_seconds:
                    last_sent = self._send_waiting(waiting)
                else:
                    self._reports_waiting = True
                continue
            if waiting:  # the reports before another one (or a flush) go first, in order
                last_sent = self._send_waiting(waiting)
            try:
                if item is None:
                    return
                if item is not _SEND_NOW and not self.stale:
                    self._post(item[0], item[1])
            except ReportNotDelivered as exc:
                log.error("report %s not delivered: %s", item[0] if item else "", exc)
            finally:
                self._queue.done()

    def _send_waiting(self, waiting: list[_Queued]) -> float:
        """Send the waiting reports (one alone as itself, several as ``batch`` reports), each
        step report with its age, and return when the sending began."""
        self._reports_waiting = False
        began = self._clock.monotonic()
        reports: list[tuple[str, dict[str, Any]]] = [
            (kind, {**body, "ago": round(max(0.0, began - queued), 6)} if kind == "steps" else body)
            for kind, body, queued in waiting
        ]
        try:
            if not self.stale:
                if len(reports) == 1:
                    self._post(*reports[0])
                for i in range(0, len(reports) if len(reports) > 1 else 0, BATCH_LIMIT):
                    batch = [{"kind": k, "body": b} for k, b in reports[i : i + BATCH_LIMIT]]
                    self._post("batch", {"reports": batch})
        except ReportNotDelivered as exc:
            log.error("reports %s not delivered: %s", [kind for kind, _ in reports], exc)
        finally:
            for _ in waiting:
                self._queue.done()
            waiting.clear()
        return began

    def _ask_loop(self) -> None:
        while True:
            with self._ahead:
                while not self._closed.is_set():
                    if self._ask_at is not None:
                        wait = self._ask_at - self._clock.monotonic()
                        if wait <= 0:
                            break
                        self._ahead.wait(wait)
                    else:
                        self._ahead.wait()
                if self._closed.is_set():
                    return
                self._ask_at = None
                end = self._expected_end
                short = end is not None and end - self._step_began < self._report_seconds
                recent = end is not None and self._last_asked >= end - self._report_seconds
                if short and recent and self._last_asked > self._scheduled_with:
                    continue  # a short step: an answer that came since is recent enough
                asked = self._asking_since = self._clock.monotonic()
            answered = False
            if self.stale or self._closed.is_set():
                pass
            elif short and self._reports_waiting:
                # The reports waiting to go are the question: one request, not two.
                self._queue.put(_SEND_NOW)
                answered = self._wait_for_answer(asked, timeout=2.0)
            else:
                answered = self._ask(asked, timeout=2.0)
            with self._ahead:
                self._asking_since = None
                if answered:
                    self._answered_since = asked
                    self._round_trip = self._clock.monotonic() - asked
                elif not self.stale and not self._closed.is_set():
                    self._silent = True
                self._ahead.notify_all()

    def _ask(self, asked: float, timeout: float) -> bool:
        """Ask for the directive with a heartbeat sent at once (at `asked`), waiting at most
        `timeout` for it; whether the service answered."""
        body = HeartbeatReport(step=self.step, stall_dump=self.stall_dump).to_json()
        try:
            response = self._client.post(f"{self._base}/heartbeat", json=body, timeout=timeout)
        except httpx.HTTPError:
            return False
        self._take_answer(response, asked)
        return response.status_code < 300 or response.status_code == 409

    def _beat_loop(self) -> None:
        while not self._closed.wait(self._heartbeat_seconds):
            if self.stale:
                return
            body = HeartbeatReport(step=self.step, stall_dump=self.stall_dump).to_json()
            try:
                self._post("heartbeat", body, patience=self._heartbeat_seconds)
            except ReportNotDelivered:
                continue

    def _post(self, kind: str, body: dict[str, Any], patience: float | None = None) -> None:
        url = f"{self._base}/{kind}"
        wait = self._patience if patience is None else patience
        asked = self._clock.monotonic()
        self._take_answer(deliver(self._client, url, kind, body, wait, self._clock), asked)

    def _take_answer(self, response: httpx.Response, asked: float) -> None:
        """The directive of an answer to a question sent at `asked`: a 409 means this attempt
        is no longer the run's."""
        action: Action
        if response.status_code == 409:
            self.stale = True
            action = "stop"
        elif response.status_code >= 300:
            return
        else:
            try:
                answered = response.json().get("action", "continue")
            except ValueError:
                return
            if answered not in ACTION_RANK:
                return
            action = answered
        # The directive is held before a step's end waiting for this answer reads it.
        changed = self._hold(action)
        self._answered(asked)
        if changed:
            self._announce(action)

    def _take(self, action: Action) -> None:
        if self._hold(action):
            self._announce(action)

    def _hold(self, action: Action) -> bool:
        """The one place the directive changes: to `action` when it is stronger than the one
        held (whether it changed; the caller tells the listeners)."""
        with self._lock:
            if ACTION_RANK[action] <= ACTION_RANK[self._action]:
                return False
            self._action = action
            return True

    def _wait_for_answer(self, asked: float, timeout: float) -> bool:
        """Wait up to `timeout` for the answer to a request sent at `asked` or later."""
        with self._ahead:
            return self._ahead.wait_for(
                lambda: self._last_asked >= asked or self._closed.is_set(), timeout=timeout
            )

    def _answered(self, asked: float) -> None:
        with self._ahead:
            self._last_asked = max(self._last_asked, asked)
            self._silent = False
            self._ahead.notify_all()

    def _announce(self, action: Action) -> None:
        for listener in self._listeners:
            try:
                listener(action)
            except Exception:  # a listener (telemetry) must not stop the reports
                log.exception("a directive listener failed")


class _Outbox:
    """The reports waiting for the sending thread, in order, on the reporter's clock (as
    `queue.Queue`, whose timed waits count the machine's time). Each item taken is marked
    `done` once sent or given up; `drained` waits for that."""

    def __init__(self, clock: Clock) -> None:
        self._items: deque[_Queued | None] = deque()
        self._unfinished = 0
        self._abandoned = False
        self._changed = clock.condition()

    def put(self, item: _Queued | None) -> None:
        with self._changed:
            self._items.append(item)
            self._unfinished += 1
            self._changed.notify_all()

    def get(self, timeout: float | None) -> _Queued | None:
        """The next item, waiting up to `timeout` seconds for one (None: as long as it takes);
        raises `queue.Empty` when none came."""
        with self._changed:
            if not self._changed.wait_for(lambda: bool(self._items), timeout):
                raise queue.Empty
            return self._items.popleft()

    def done(self) -> None:
        with self._changed:
            self._unfinished -= 1
            self._changed.notify_all()

    def abandon(self) -> None:
        """The sending thread died: nothing will be done any more, and nobody waits for it."""
        with self._changed:
            self._abandoned = True
            self._changed.notify_all()

    def drained(self, timeout: float | None) -> bool:
        """Wait up to `timeout` seconds until every item put was done (or abandoned); whether
        it was."""
        with self._changed:
            return self._changed.wait_for(lambda: self._unfinished == 0 or self._abandoned, timeout)


# Put on the queue by `flush`: the step reports waiting to be sent go at once.
_SEND_NOW: _Queued = ("", {}, 0.0)
