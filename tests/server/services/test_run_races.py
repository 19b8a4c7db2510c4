"""A user's pause, cancel and resume racing each other and the end of the run (the job's end
report, the controller's `apply`), and a task's cancel racing its job's result, on SQLite and
Postgres: whoever changes the row second sees it as the first one left it, and a lost race
answers with the real phase or state.

Each race is set up the same way: the first action's request goes until it is about to lock or
write the run's row; there the rival runs, to its end, in a thread and sessions of its own; then
the first action goes on. That is the window a request that reads the run without a lock and
writes it after loses an update in (a run COMPLETED by its job came back PAUSING with its end
time set). No sleeps: the first action waits for the rival's thread to end.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import event, select

from akka_training.backends.base import JobStatus
from akka_training.controller import training
from akka_training.controller.apply import apply, load_view, record_launched
from akka_training.controller.views import Decision, Limits, Probe
from akka_training.core.failures import FailureReason
from akka_training.core.phases import RuleName
from akka_training.server.services import tasks
from akka_training.storage.models import Claim, Run
from akka_training.storage.tokens import create_task_token
from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, error, register, sft_plan

# The statements by which a request first takes hold of a run or a task: a locking read of its
# row, or a write of it, its claim or its events (a token's last use is written earlier,
# elsewhere).
_TAKES_HOLD = re.compile(
    r"^\s*(UPDATE (runs|tasks|claims)\b|INSERT INTO (events|claims)\b"
    r"|SELECT\b.*\sFROM (runs|tasks)\b.*\sFOR UPDATE)",
    re.DOTALL,
)

# How long the first request lets its rival run at most (it takes well under a second).
RIVAL_SECONDS = 60.0
LIMITS = Limits(
    start_retries=3,
    retry_base_seconds=1.0,
    stall_seconds=600.0,
    unreachable_seconds=600.0,
    stop_grace_seconds=5.0,
)


@pytest.fixture
def api(trainer: InProcessTrainer) -> httpx.Client:
    register(trainer.client(), "maths/train", chat_rows(12))
    return trainer.client()


class Job:
    """The job of a run's attempt, as it reports."""

    def __init__(self, trainer: InProcessTrainer, run_id: str) -> None:
        launch = trainer.admit(run_id)
        record_launched(trainer.ctx.db, run_id, launch.attempt, {"pid": 4242})
        self.client = trainer.job_client(launch)
        self.base = f"/v1/jobs/{run_id}/attempts/{launch.attempt}"

    def report(self, kind: str, body: dict[str, Any]) -> httpx.Response:
        return self.client.post(f"{self.base}/{kind}", json=body)


def training_run(api: httpx.Client, trainer: InProcessTrainer) -> tuple[str, Job]:
    """A run whose launched job has reported a step: TRAINING."""
    run_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    job = Job(trainer, run_id)
    assert job.report("started", {"placement": {"host": "h", "pid": 1}}).is_success
    assert job.report("steps", {"step": 1, "totalSteps": 4, "metrics": {"loss": 1.0}}).is_success
    assert api.get(f"/v1/runs/{run_id}").json()["phase"] == "TRAINING"
    return run_id, job


@contextmanager
def rival_first(trainer: InProcessTrainer, rival: Callable[[], Any]) -> Iterator[list[Any]]:
    """Within the block, the first statement by which a request takes hold of a row waits for
    `rival` to run to its end in a thread of its own; what `rival` returned (or raised) is the
    one item of the list yielded."""
    engine = trainer.ctx.db.engine
    outcome: list[Any] = []
    fired = threading.Event()
    rivals: list[threading.Thread] = []

    def run_rival() -> None:
        try:
            outcome.append(rival())
        except Exception as exc:  # the test reads it
            outcome.append(exc)

    def before(conn: Any, statement: Any, *_args: Any) -> None:
        if fired.is_set() or not _TAKES_HOLD.match(str(statement.compile(dialect=conn.dialect))):
            return
        fired.set()
        thread = threading.Thread(target=run_rival, name="rival")
        rivals.append(thread)
        thread.start()
        # A guard, not a wait for a condition: a rival still running then waits for this
        # request (which must hold nothing yet), and the test fails below instead of hanging.
        thread.join(RIVAL_SECONDS)

    # Before the statement is compiled and sent, so before it takes SQLite's write turn.
    event.listen(engine, "before_execute", before)
    try:
        yield outcome
    finally:
        event.remove(engine, "before_execute", before)
    assert rivals, "the rival never ran: no request took hold of the run"
    waited = rivals[0].is_alive()
    rivals[0].join()
    assert not waited, "the rival waited for the first request, which held the run already"


def stored(trainer: InProcessTrainer, run_id: str) -> Run:
    with trainer.ctx.db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        session.expunge(run)
        return run


def open_claims(trainer: InProcessTrainer, run_id: str) -> list[str]:
    with trainer.ctx.db.session() as session:
        rows = session.scalars(
            select(Claim.state).where(Claim.run_id == run_id, Claim.state != "RELEASED")
        )
        return list(rows)


def assert_ended(run: Run, phase: str) -> None:
    assert (run.phase, run.requested) == (phase, None)
    assert run.ended_at is not None


def test_a_pause_that_loses_to_the_job_s_end_answers_the_run_completed(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    run_id, job = training_run(api, trainer)
    finished = {"adapter": f"runs/{run_id}/adapter/", "step": 4}
    with rival_first(trainer, lambda: job.report("finished", finished)) as rival:
        paused = api.post(f"/v1/runs/{run_id}/pause", json={"checkpoint": "save"})
    assert rival[0].status_code == 200, rival[0].text
    assert answer(paused) == (
        409,
        error("conflict", f"Run {run_id} is COMPLETED; only an open run can pause."),
    )
    assert_ended(stored(trainer, run_id), "COMPLETED")


def test_a_cancel_that_loses_to_the_job_s_end_answers_the_run_completed(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    run_id, job = training_run(api, trainer)
    finished = {"adapter": f"runs/{run_id}/adapter/", "step": 4}
    with rival_first(trainer, lambda: job.report("finished", finished)) as rival:
        cancelled = api.post(f"/v1/runs/{run_id}/cancel")
    assert rival[0].status_code == 200, rival[0].text
    assert answer(cancelled) == (
        409,
        error("conflict", f"Run {run_id} is already COMPLETED."),
    )
    assert_ended(stored(trainer, run_id), "COMPLETED")


def test_a_pause_that_loses_to_the_controller_failing_the_run_answers_the_run_failed(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    run_id, _ = training_run(api, trainer)
    with trainer.ctx.db.session() as session:
        view = load_view(session, stored(trainer, run_id))
    crashed = Decision(
        rule=RuleName.FAIL,
        reason=FailureReason.JOB_CRASHED,
        detail="exit code 1",
        attempt_exited=True,
        release_claim=True,
    )
    with rival_first(trainer, lambda: apply(trainer.ctx.db, view, crashed)):
        paused = api.post(f"/v1/runs/{run_id}/pause", json={"checkpoint": "latest"})
    assert answer(paused) == (
        409,
        error("conflict", f"Run {run_id} is FAILED; only an open run can pause."),
    )
    assert_ended(stored(trainer, run_id), "FAILED")
    assert open_claims(trainer, run_id) == []


def test_a_resume_that_loses_to_a_cancel_leaves_the_run_cancelled(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    run_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    assert api.post(f"/v1/runs/{run_id}/pause", json={"checkpoint": "save"}).json()["phase"] == (
        "PAUSED"
    )
    other = trainer.client()
    with rival_first(trainer, lambda: other.post(f"/v1/runs/{run_id}/cancel")) as rival:
        resumed = api.post(f"/v1/runs/{run_id}/resume")
    assert rival[0].json()["phase"] == "CANCELLED"
    assert answer(resumed) == (
        409,
        error("conflict", f"Run {run_id} is CANCELLED; only a PAUSED run resumes."),
    )
    assert_ended(stored(trainer, run_id), "CANCELLED")
    assert open_claims(trainer, run_id) == []


def test_a_pause_that_loses_to_a_cancel_leaves_the_cancel_pending(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    run_id, job = training_run(api, trainer)
    other = trainer.client()
    with rival_first(trainer, lambda: other.post(f"/v1/runs/{run_id}/cancel")) as rival:
        paused = api.post(f"/v1/runs/{run_id}/pause", json={"checkpoint": "save"})
    assert (rival[0].status_code, rival[0].json()["requested"]) == (200, "cancel")
    assert answer(paused) == (409, error("conflict", being_cancelled(run_id)))
    run = stored(trainer, run_id)
    assert (run.phase, run.requested) == ("TRAINING", "cancel")
    assert job.report("heartbeat", {}).json() == {"action": "stop"}


def test_a_cancel_that_comes_second_to_a_pause_still_cancels(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    run_id, job = training_run(api, trainer)
    other = trainer.client()
    pause = {"checkpoint": "save"}
    with rival_first(trainer, lambda: other.post(f"/v1/runs/{run_id}/pause", json=pause)) as rival:
        cancelled = api.post(f"/v1/runs/{run_id}/cancel")
    assert rival[0].json()["phase"] == "PAUSING"
    assert (cancelled.status_code, cancelled.json()["requested"]) == (200, "cancel")
    run = stored(trainer, run_id)
    assert (run.phase, run.requested) == ("PAUSING", "cancel")
    assert job.report("heartbeat", {}).json() == {"action": "stop"}
    # A pause asked again now would undo the cancel.
    paused = api.post(f"/v1/runs/{run_id}/pause", json=pause)
    assert answer(paused) == (409, error("conflict", being_cancelled(run_id)))


def test_a_second_pause_answers_the_first_one(api: httpx.Client, trainer: InProcessTrainer) -> None:
    run_id, job = training_run(api, trainer)
    first = api.post(f"/v1/runs/{run_id}/pause", json={"checkpoint": "save"}).json()
    again = api.post(f"/v1/runs/{run_id}/pause", json={"checkpoint": "latest"})
    assert again.status_code == 200
    assert (again.json()["phase"], again.json()["requested"]) == ("PAUSING", "pause-save")
    assert first["requested"] == "pause-save"
    assert job.report("heartbeat", {}).json() == {"action": "save-and-stop"}


def test_a_pause_after_an_answered_cancel_is_refused_and_the_job_is_still_told_to_stop(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    run_id, job = training_run(api, trainer)
    assert api.post(f"/v1/runs/{run_id}/cancel").json()["requested"] == "cancel"
    for checkpoint in ("save", "latest"):
        paused = api.post(f"/v1/runs/{run_id}/pause", json={"checkpoint": checkpoint})
        assert answer(paused) == (409, error("conflict", being_cancelled(run_id)))
    assert job.report("heartbeat", {}).json() == {"action": "stop"}
    assert job.report("stopped", {"step": 1}).is_success
    # The job is gone: the controller's pass ends the run as asked first.
    with trainer.ctx.db.session() as session:
        view = load_view(session, stored(trainer, run_id))
    now = datetime.now(UTC)
    gone = Probe(status=JobStatus("exited", exit_code=0))
    apply(trainer.ctx.db, view, training.process(view, gone, now, LIMITS), now)
    assert_ended(stored(trainer, run_id), "CANCELLED")


def test_a_task_cancel_that_loses_to_the_task_s_result_answers_it_succeeded(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    task_id, job = pending_task(trainer)
    result = {"result": {"rows": 3}}
    with rival_first(
        trainer, lambda: job.post(f"/v1/tasks/{task_id}/reports/finished", json=result)
    ) as rival:
        cancelled = api.post(f"/v1/tasks/{task_id}/cancel")
    assert rival[0].json() == {"action": "continue"}
    assert answer(cancelled) == (409, error("conflict", f"Task {task_id} is already SUCCEEDED."))
    task = api.get(f"/v1/tasks/{task_id}").json()
    assert (task["state"], task["result"]) == ("SUCCEEDED", {"rows": 3})


def test_a_task_result_that_loses_to_a_cancel_is_told_to_stop(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    task_id, job = pending_task(trainer)
    with rival_first(trainer, lambda: api.post(f"/v1/tasks/{task_id}/cancel")) as rival:
        finished = job.post(f"/v1/tasks/{task_id}/reports/finished", json={"result": {}})
    assert rival[0].json()["state"] == "CANCELLED"
    assert answer(finished) == (409, error("conflict", f"Task {task_id} is CANCELLED; stop."))
    task = api.get(f"/v1/tasks/{task_id}").json()
    assert (task["state"], task["result"]) == ("CANCELLED", None)


def pending_task(trainer: InProcessTrainer) -> tuple[str, httpx.Client]:
    """A task not launched yet, and a client holding its job's token."""
    with trainer.ctx.db.session() as session:
        task = tasks.submit(session, kind="merge", project="maths", pool="default", params={})
        token = create_task_token(session, task.id, "maths")
    return task.id, trainer.client(token)


def being_cancelled(run_id: str) -> str:
    return f"Run {run_id} is being cancelled; a pause cannot undo the cancel asked before it."
