"""The phase modules decide from views alone."""

from datetime import UTC, datetime, timedelta

from akka_training.backends.base import JobStatus
from akka_training.controller import pausing, preparing, queued, terminal, training
from akka_training.controller.views import AttemptView, Limits, Probe, RunView
from akka_training.core.failures import FailureReason

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
LIMITS = Limits(
    start_retries=2,
    retry_base_seconds=1,
    stall_seconds=60,
    unreachable_seconds=30,
    stop_grace_seconds=5,
)


def attempt(**kw: object) -> AttemptView:
    base: dict[str, object] = dict(
        number=1,
        state="launched",
        handle={"pid": 1},
        launch_tries=1,
        next_try_at=None,
        outcome=None,
        stop_sent=False,
        heartbeat_at=NOW,
    )
    base.update(kw)
    return AttemptView(**base)  # type: ignore[arg-type]


def view(phase: str, **kw: object) -> RunView:
    base: dict[str, object] = dict(
        id="r",
        phase=phase,
        requested=None,
        attempt=attempt(),
        claim_state="GRANTED",
        claim_created_at=NOW,
        last_step_at=NOW,
        stalled=False,
    )
    base.update(kw)
    return RunView(**base)  # type: ignore[arg-type]


def test_a_granted_claim_admits_the_run_with_a_new_attempt() -> None:
    d = queued.process(view("QUEUED", attempt=None), Probe(), NOW, LIMITS)
    assert d.rule == "admit" and d.new_attempt


def test_a_waiting_run_fails_when_the_cluster_stays_unreachable() -> None:
    v = view(
        "QUEUED", attempt=None, claim_state="QUEUED", claim_created_at=NOW - timedelta(seconds=100)
    )
    assert not queued.process(
        v, Probe(cluster_unreachable_since=NOW - timedelta(seconds=10)), NOW, LIMITS
    )
    d = queued.process(v, Probe(cluster_unreachable_since=NOW - timedelta(seconds=31)), NOW, LIMITS)
    assert d.rule == "fail" and d.reason == FailureReason.CLUSTER_UNREACHABLE and d.release_claim


def test_a_waiting_claim_larger_than_every_node_fails_its_run_with_what_to_set() -> None:
    # Queued while the cluster's nodes were not known: once the controller sees that no node
    # of the pool has 3 devices, the run fails instead of waiting on the cluster for ever.
    v = view("QUEUED", attempt=None, claim_state="QUEUED", claim_devices=3, pool="training")
    d = queued.process(v, Probe(largest_node=2), NOW, LIMITS)
    assert d.rule == "fail" and d.reason == FailureReason.JOB_START_FAILED and d.release_claim
    assert d.detail == (
        "It claims 3 devices, and the largest node of pool training offers 2: a run's devices "
        "are on one node. Set execution.gpus to 2 or less, or choose another execution.pool."
    )
    assert not queued.process(v, Probe(largest_node=4), NOW, LIMITS)
    assert not queued.process(v, Probe(largest_node=None), NOW, LIMITS)  # not known
    assert not queued.process(v, Probe(largest_node=0), NOW, LIMITS)  # no node answers yet


def test_a_pending_attempt_launches_after_its_back_off() -> None:
    later = attempt(state="pending", next_try_at=NOW + timedelta(seconds=5))
    assert not preparing.process(view("PREPARING", attempt=later), Probe(), NOW, LIMITS)
    assert preparing.process(
        view("PREPARING", attempt=later), Probe(), NOW + timedelta(seconds=6), LIMITS
    ).launch


def test_a_job_gone_without_a_report_is_classified() -> None:
    probe = Probe(
        status=JobStatus("exited", exit_code=1),
        log_tail="torch.OutOfMemoryError: CUDA out of memory.",
    )
    d = training.process(view("TRAINING"), probe, NOW, LIMITS)
    assert (
        d.rule == "fail"
        and d.reason == FailureReason.DEVICE_OOM
        and d.attempt_exited
        and d.release_claim
    )


def test_a_job_that_reported_its_end_only_needs_bookkeeping() -> None:
    d = terminal.process(
        view("COMPLETED", attempt=attempt(outcome="finished")),
        Probe(status=JobStatus("exited", 0)),
        NOW,
        LIMITS,
    )
    assert d.rule is None and d.attempt_exited and d.release_claim


def test_a_quiet_job_is_marked_stalled_once() -> None:
    old = NOW - timedelta(seconds=61)
    assert training.process(
        view("TRAINING", last_step_at=old), Probe(status=JobStatus("running")), NOW, LIMITS
    ).stalled
    assert not training.process(
        view("TRAINING", last_step_at=old, stalled=True),
        Probe(status=JobStatus("running")),
        NOW,
        LIMITS,
    )


def test_pause_latest_stops_the_job_then_pauses() -> None:
    v = view("PAUSING", requested="pause-latest")
    assert pausing.process(v, Probe(status=JobStatus("running")), NOW, LIMITS).stop_job
    stopped = view("PAUSING", requested="pause-latest", attempt=attempt(stop_sent=True))
    d = pausing.process(stopped, Probe(status=JobStatus("exited", signal=15)), NOW, LIMITS)
    assert d.rule == "paused" and d.release_claim


def test_a_cancel_stops_the_job_and_ends_the_run_when_it_is_gone() -> None:
    v = view("TRAINING", requested="cancel")
    assert training.process(v, Probe(status=JobStatus("running")), NOW, LIMITS).stop_job
    gone = view("TRAINING", requested="cancel", attempt=attempt(stop_sent=True))
    d = training.process(gone, Probe(status=JobStatus("exited", signal=15)), NOW, LIMITS)
    assert d.rule == "cancel" and d.release_claim


def test_a_killed_job_without_an_oom_kill_is_retried_from_its_snapshot() -> None:
    probe = Probe(status=JobStatus("exited", signal=9), log_tail="step 3\n")
    d = training.process(view("TRAINING", crashes=1), probe, NOW, LIMITS)
    assert d.rule == "requeue" and d.retry and d.attempt_exited and d.release_claim
    assert d.reason is None
    assert d.note is not None
    assert "killed (SIGKILL) without being asked to stop" in d.note
    assert "retry 2 of 3" in d.note


def test_a_job_that_keeps_dying_fails_with_the_true_cause_after_its_retries() -> None:
    probe = Probe(status=JobStatus("exited", signal=9), log_tail="step 3\n")
    d = training.process(view("TRAINING", crashes=3), probe, NOW, LIMITS)
    assert d.rule == "fail" and d.reason == FailureReason.JOB_KILLED
    assert d.detail is not None
    assert d.detail.startswith("the job died without a report on 4 attempts in a row; the last:")
    assert "the kernel recorded no out-of-memory kill" in d.detail


def test_a_killed_job_of_an_interactive_run_fails_the_run_with_its_reason() -> None:
    probe = Probe(status=JobStatus("exited", signal=9), log_tail="serving\n")
    d = training.process(view("TRAINING", interactive=True), probe, NOW, LIMITS)
    assert d.rule == "fail" and d.reason == FailureReason.JOB_KILLED and d.release_claim
    assert d.detail is not None
    assert d.detail.endswith(
        "An interactive run's job is not started again; create a new training client."
    )


def test_sigkill_is_host_oom_only_when_the_kernel_says_so() -> None:
    probe = Probe(status=JobStatus("exited", signal=9, oom_killed=True))
    d = training.process(view("TRAINING"), probe, NOW, LIMITS)
    assert d.rule == "fail" and d.reason == FailureReason.HOST_OOM
    assert d.detail is not None and "out-of-memory killer ended the job" in d.detail


def test_a_job_ended_by_sigterm_without_a_report_is_retried() -> None:
    probe = Probe(status=JobStatus("exited", signal=15))
    d = training.process(view("TRAINING"), probe, NOW, LIMITS)
    assert d.rule == "requeue" and d.retry
    assert d.note is not None and "the job ended with signal 15 (SIGTERM)" in d.note


def test_running_out_of_memory_is_not_retried() -> None:
    probe = Probe(
        status=JobStatus("exited", exit_code=1),
        log_tail="RuntimeError: DefaultCPUAllocator: can't allocate memory",
    )
    d = training.process(view("TRAINING"), probe, NOW, LIMITS)
    assert d.rule == "fail" and d.reason == FailureReason.HOST_OOM


def test_the_attempt_after_deaths_in_a_row_launches_after_a_doubling_back_off() -> None:
    first = queued.process(view("QUEUED", attempt=None), Probe(), NOW, LIMITS)
    assert first.launch_delay is None
    third = queued.process(view("QUEUED", attempt=None, crashes=3), Probe(), NOW, LIMITS)
    assert third.rule == "admit" and third.launch_delay == 4


def test_a_job_that_dies_while_pausing_pauses_at_its_last_snapshot() -> None:
    probe = Probe(status=JobStatus("exited", signal=9))
    d = pausing.process(view("PAUSING", requested="pause-save"), probe, NOW, LIMITS)
    assert d.rule == "paused" and d.attempt_exited and d.release_claim
