"""Tasks are decided from views alone: launched when due, stopped when cancelled, and ended by
the controller only when their job is gone without a report."""

from datetime import UTC, datetime, timedelta

from akka_training.backends.base import JobStatus
from akka_training.controller.tasks import TaskDecision, TaskView, decide
from akka_training.core.states import TaskRule

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def view(**kw: object) -> TaskView:
    base: dict[str, object] = dict(
        id="tk1",
        state="RUNNING",
        requested=None,
        handle={"pid": 1},
        launch_tries=1,
        next_try_at=None,
        reported=False,
        stop_sent=False,
    )
    base.update(kw)
    return TaskView(**base)  # type: ignore[arg-type]


def pending(**kw: object) -> TaskView:
    return view(state="PENDING", handle=None, launch_tries=0, **kw)


def test_a_pending_task_launches_once_its_back_off_has_passed() -> None:
    assert decide(pending(), None, "", NOW) == TaskDecision(launch=True)
    later = pending(next_try_at=NOW + timedelta(seconds=2))
    assert decide(later, None, "", NOW) == TaskDecision()
    assert decide(later, None, "", NOW + timedelta(seconds=3)) == TaskDecision(launch=True)


def test_a_cancelled_pending_task_ends_without_a_job() -> None:
    assert decide(pending(requested="cancel"), None, "", NOW) == TaskDecision(end=TaskRule.CANCEL)


def test_a_running_task_is_left_alone_until_its_job_is_gone() -> None:
    assert decide(view(), JobStatus("running"), "", NOW) == TaskDecision()
    # The cluster did not answer: nothing is decided on no news.
    assert decide(view(), None, "", NOW) == TaskDecision()


def test_a_cancel_stops_the_job_once_and_ends_the_task_when_it_is_gone() -> None:
    assert decide(view(requested="cancel"), JobStatus("running"), "", NOW) == TaskDecision(
        stop_job=True
    )
    sent = view(requested="cancel", stop_sent=True)
    assert decide(sent, JobStatus("running"), "", NOW) == TaskDecision()
    assert decide(sent, JobStatus("exited", None, 15), "", NOW) == TaskDecision(end=TaskRule.CANCEL)


def test_a_job_gone_without_a_report_fails_the_task_with_its_last_words() -> None:
    tail = "loading\n\nTraceback (most recent call last):\nRuntimeError: boom\n"
    decision = decide(view(), JobStatus("exited", 3), tail, NOW)
    assert decision == TaskDecision(
        end=TaskRule.FAIL,
        failure="this task's job ended without reporting its result (exit code 3); its last "
        "lines of output are in the detail",
        detail="loading\nTraceback (most recent call last):\nRuntimeError: boom",
    )
    lost = decide(view(), JobStatus("missing", detail="Ray lost it"), "", NOW)
    assert lost.end == TaskRule.FAIL and lost.failure is not None
    assert "(the cluster lost it)" in lost.failure
    killed = decide(view(), JobStatus("exited", None, 9), "", NOW)
    assert killed.failure is not None and "(signal 9)" in killed.failure


def test_a_job_that_reported_its_end_is_not_judged_again() -> None:
    assert decide(view(reported=True), JobStatus("exited", 0), "", NOW) == TaskDecision()


def test_a_task_whose_claim_is_queued_waits_for_its_devices() -> None:
    assert decide(pending(claim_state="QUEUED"), None, "", NOW) == TaskDecision()
    assert decide(pending(claim_state="GRANTED"), None, "", NOW) == TaskDecision(launch=True)
    # A cancel while it waits ends it and gives its place back.
    assert decide(pending(claim_state="QUEUED", requested="cancel"), None, "", NOW) == (
        TaskDecision(end=TaskRule.CANCEL, release_claim=True)
    )


def test_a_tasks_claim_is_released_once_its_job_is_gone_however_it_ended() -> None:
    granted = {"claim_state": "GRANTED"}
    # It reported its end: its job still exits; the devices go once it is gone.
    done = view(state="SUCCEEDED", reported=True, **granted)
    assert decide(done, JobStatus("running"), "", NOW) == TaskDecision()
    assert decide(done, None, "", NOW) == TaskDecision()
    assert decide(done, JobStatus("exited", 0), "", NOW) == TaskDecision(release_claim=True)
    # Failed to start (never launched): nothing to wait for.
    never = view(state="FAILED", handle=None, **granted)
    assert decide(never, None, "", NOW) == TaskDecision(release_claim=True)
    # Killed: gone without a report.
    killed = decide(view(**granted), JobStatus("exited", None, 9), "", NOW)
    assert (killed.end, killed.release_claim) == (TaskRule.FAIL, True)
    cancelled = view(requested="cancel", stop_sent=True, **granted)
    assert decide(cancelled, JobStatus("exited", None, 15), "", NOW) == TaskDecision(
        end=TaskRule.CANCEL, release_claim=True
    )
    # A task without a claim has nothing to give back.
    assert decide(view(state="SUCCEEDED", reported=True), JobStatus("exited", 0), "", NOW) == (
        TaskDecision()
    )


def test_an_endpoints_job_gone_without_a_report_is_launched_again() -> None:
    serving = view(kind="serve", claim_state="GRANTED")
    killed = decide(serving, JobStatus("exited", None, 9), "", NOW)
    assert killed == TaskDecision(relaunch=True)
    # A deleted endpoint's job that is gone ends it, as any cancelled task.
    deleted = decide(
        view(kind="serve", requested="cancel", stop_sent=True), JobStatus("exited", 0), "", NOW
    )
    assert deleted.end == TaskRule.CANCEL
