"""Decisions applied to real rows, on SQLite and Postgres: each kind of decision, the guard against
a run that moved since its view was taken, and the bookkeeping of launches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.controller.apply import (
    apply,
    load_view,
    load_views,
    record_launch_failure,
    record_launched,
    record_stop_sent,
)
from akka_training.controller.views import Decision, RunView
from akka_training.core.failures import FailureReason, failure_text
from akka_training.core.figures import Figures
from akka_training.core.phases import Phase, RuleName
from akka_training.core.run_figures import RunFigures
from akka_training.core.states import AttemptOutcome, AttemptState, ClaimState, Request
from akka_training.storage.db import Database
from akka_training.storage.models import Attempt, Claim, Event, RolloutStep, Run, Step, Token
from akka_training.storage.tokens import create_job_token
from akka_training.storage.transitions import move, request
from tests.controller.rows import (
    T0,
    add_attempt,
    add_claim,
    add_run,
    add_snapshot,
    add_steps_and_rollouts,
)

NOW = T0 + timedelta(minutes=10)


def stored(session: Session, run_id: str = "r1") -> Run:
    run = session.get(Run, run_id)
    assert run is not None
    return run


def failure_reason(db: Database, run_id: str = "r1") -> str:
    """The run's `failureReason` as the API shows it."""
    with db.session() as session:
        run = stored(session, run_id)
        assert run.failure_code is not None
        return failure_text(FailureReason(run.failure_code), run.failure_detail)


def view_of(db: Database, run_id: str = "r1") -> RunView:
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return load_view(session, run)


def events(db: Database, run_id: str = "r1") -> list[tuple[str, str]]:
    with db.session() as session:
        rows = session.scalars(select(Event).where(Event.run_id == run_id).order_by(Event.id))
        return [(e.kind, e.message) for e in rows]


def claims(db: Database, run_id: str = "r1") -> list[tuple[str, int]]:
    with db.session() as session:
        rows = session.scalars(select(Claim).where(Claim.run_id == run_id).order_by(Claim.id))
        return [(c.state, c.devices) for c in rows]


def test_a_failure_moves_the_run_with_its_reason_and_gives_the_devices_back(
    database: Database,
) -> None:
    with database.session() as session:
        run = add_run(session)
        add_claim(session, run)
        add_attempt(session, run, 1)
    decision = Decision(
        rule=RuleName.FAIL,
        reason=FailureReason.JOB_CRASHED,
        detail="Traceback: boom",
        attempt_exited=True,
        release_claim=True,
    )

    apply(database, view_of(database), decision, NOW)

    with database.session() as session:
        run = stored(session)
        attempt = session.get(Attempt, ("r1", 1))
        assert attempt is not None
        assert (run.phase, run.failure_code, run.failure_detail) == (
            "FAILED",
            "job-crashed",
            "Traceback: boom",
        )
        assert run.ended_at == NOW and run.phase_seconds == {"TRAINING": 600.0}
        assert run.gpu_seconds == 600.0  # one device held for the ten minutes
        assert (attempt.state, attempt.outcome, attempt.ended_at) == ("exited", "crashed", NOW)
    assert claims(database) == [("RELEASED", 1)]
    assert events(database) == [
        (
            "phase",
            "TRAINING -> FAILED (fail): this run's job stopped unexpectedly; its last log lines "
            "follow",
        ),
        ("claim", "released 1 device(s) of pool default"),
    ]


def test_a_finished_job_only_needs_its_bookkeeping(database: Database) -> None:
    with database.session() as session:
        run = add_run(session, phase=Phase.COMPLETED)
        add_claim(session, run)
        add_attempt(session, run, 1, outcome=AttemptOutcome.FINISHED)

    apply(database, view_of(database), Decision(attempt_exited=True, release_claim=True), NOW)

    with database.session() as session:
        run = stored(session)
        attempt = session.get(Attempt, ("r1", 1))
        assert attempt is not None
        assert run.phase == "COMPLETED" and run.failure_code is None
        # The outcome the job reported stays.
        assert (attempt.state, attempt.outcome) == ("exited", "finished")
    assert claims(database) == [("RELEASED", 1)]
    assert events(database) == [("claim", "released 1 device(s) of pool default")]


def test_a_lost_job_requeues_the_run_with_a_new_claim(database: Database) -> None:
    with database.session() as session:
        run = add_run(session)
        add_claim(session, run)
        add_attempt(session, run, 1)
    decision = Decision(rule=RuleName.REQUEUE, attempt_exited=True, release_claim=True)

    apply(database, view_of(database), decision, NOW)

    with database.session() as session:
        run = stored(session)
        attempt = session.get(Attempt, ("r1", 1))
        assert attempt is not None
        assert run.phase == "QUEUED" and run.failure_code is None
        assert attempt.outcome == "lost"
    assert claims(database) == [("RELEASED", 1), ("QUEUED", 1)]
    assert view_of(database).claim_state == ClaimState.QUEUED
    assert events(database)[0] == ("phase", "TRAINING -> QUEUED (requeue)")


def test_a_new_attempt_resumes_from_the_newest_snapshot_and_drops_later_steps(
    database: Database,
) -> None:
    with database.session() as session:
        run = add_run(session, phase=Phase.QUEUED)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.EXITED)
        for step in (2, 4):
            add_snapshot(session, "r1", step)
        add_steps_and_rollouts(session, "r1", range(1, 7))
        run.observed_step = 6
        run.last_step_at = T0
        run.stalled_since = T0

    apply(database, view_of(database), Decision(rule=RuleName.ADMIT, new_attempt=True), NOW)

    with database.session() as session:
        run = stored(session)
        attempt = session.get(Attempt, ("r1", 2))
        assert attempt is not None
        assert (run.phase, run.attempt, run.observed_step) == ("PREPARING", 2, 4)
        assert run.last_step_at is None and run.stalled_since is None
        assert run.started_at == NOW
        assert (attempt.state, attempt.resume_snapshot) == ("pending", "step-4")
        steps = session.scalars(select(Step.step).where(Step.run_id == "r1").order_by(Step.step))
        assert list(steps) == [1, 2, 3, 4]
        rollouts = session.scalars(
            select(RolloutStep.step).where(RolloutStep.run_id == "r1").order_by(RolloutStep.step)
        )
        assert list(rollouts) == [1, 2, 3, 4]
    assert events(database) == [
        ("phase", "QUEUED -> PREPARING (admit)"),
        ("attempt", "attempt 2 created from snapshot step-4"),
    ]


def test_steps_dropped_for_a_new_attempt_leave_the_runs_throughput_and_padding_share(
    database: Database,
) -> None:
    # Steps 1-4 kept, 3 and 4 past the snapshot at step 2: a pause at the latest snapshot.
    figures = RunFigures()
    with database.session() as session:
        run = add_run(session, phase=Phase.QUEUED)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.EXITED)
        add_snapshot(session, "r1", 2)
        for step, tokens, seconds in (
            (1, 100.0, 1.0),
            (2, 100.0, 1.0),
            (3, 900.0, 2.0),
            (4, 900.0, 2.0),
        ):
            metrics = {"tokens": tokens, "timing/step": seconds, "padding_share": 0.5}
            session.add(Step(run_id="r1", step=step, attempt=1, metrics=metrics))
            figures = figures.with_step(step, Figures.of(metrics), "sft")
        run.summary = figures
        run.observed_step = 4
    assert figures.tokens_per_second == 2000.0 / 6.0

    apply(database, view_of(database), Decision(rule=RuleName.ADMIT, new_attempt=True), NOW)
    with database.session() as session:
        summary = stored(session).summary
        assert summary.tokens_per_second == 200.0 / 2.0
        assert summary.padding_share == 0.5

    # The new attempt reports steps 3 and 4 again, once each: the run counts them once.
    with database.session() as session:
        run = stored(session)
        for step in (3, 4):
            metrics = {"tokens": 300.0, "timing/step": 1.0, "padding_share": 0.25}
            run.summary = run.summary.with_step(step, Figures.of(metrics), "sft")
    with database.session() as session:
        summary = stored(session).summary
        assert summary.tokens_per_second == 800.0 / 4.0
        # real tokens 800 of 200 / 0.5 + 600 / 0.75 = 1200 slots
        assert summary.padding_share == pytest.approx(1 - 800.0 / 1200.0)


def test_a_first_attempt_starts_from_nothing(database: Database) -> None:
    with database.session() as session:
        run = add_run(session, phase=Phase.QUEUED)
        add_claim(session, run)

    apply(database, view_of(database), Decision(rule=RuleName.ADMIT, new_attempt=True), NOW)

    with database.session() as session:
        attempt = session.get(Attempt, ("r1", 1))
        assert attempt is not None
        assert (attempt.state, attempt.resume_snapshot) == ("pending", None)
    assert events(database)[-1] == ("attempt", "attempt 1 created")


def test_a_quiet_job_is_marked_stalled(database: Database) -> None:
    with database.session() as session:
        run = add_run(session)
        add_claim(session, run)
        add_attempt(session, run, 1)

    apply(database, view_of(database), Decision(stalled=True), NOW)

    with database.session() as session:
        run = stored(session)
        assert run.phase == "TRAINING" and run.stalled_since == NOW
    assert view_of(database).stalled
    assert events(database) == [("stall", "completed steps stopped rising while the job lives")]
    assert claims(database) == [("GRANTED", 1)]


def test_a_run_that_moved_since_its_view_is_left_alone(database: Database) -> None:
    runs = ("r-cancel", "r-paused", "r-again")
    with database.session() as session:
        for run_id in runs:
            run = add_run(session, run_id)
            add_claim(session, run)
            add_attempt(session, run, 1)
    stale = [view_of(database, run_id) for run_id in runs]
    fail = Decision(
        rule=RuleName.FAIL,
        reason=FailureReason.JOB_CRASHED,
        attempt_exited=True,
        release_claim=True,
    )
    with database.session() as session:
        # A user asked for a cancel after the views were taken,
        request(session, stored(session, "r-cancel"), Request.CANCEL, NOW)
        # another for a pause (the run moved to another phase),
        paused = stored(session, "r-paused")
        move(session, paused, RuleName.REQUEST_PAUSE, request=Request.PAUSE_SAVE, now=NOW)
        # and a new attempt replaced the one the view saw (the job was lost and ran again).
        again = stored(session, "r-again")
        for rule in (RuleName.REQUEUE, RuleName.ADMIT, RuleName.START_TRAINING):
            move(session, again, rule, now=NOW)
        add_attempt(session, again, 2, AttemptState.PENDING)
    told = {run_id: events(database, run_id) for run_id in runs}

    for view in stale:
        apply(database, view, fail, NOW)

    with database.session() as session:
        left = {}
        for run_id in runs:
            run, attempt = stored(session, run_id), session.get(Attempt, (run_id, 1))
            assert attempt is not None
            left[run_id] = (run.phase, run.failure_code, attempt.state)
    assert left == {
        "r-cancel": ("TRAINING", None, "launched"),
        "r-paused": ("PAUSING", None, "launched"),
        "r-again": ("TRAINING", None, "launched"),
    }
    assert all(claims(database, run_id) == [("GRANTED", 1)] for run_id in runs)
    assert {run_id: events(database, run_id) for run_id in runs} == told


def test_a_launch_is_recorded_once(database: Database) -> None:
    with database.session() as session:
        run = add_run(session, phase=Phase.PREPARING)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.PENDING)
    before = datetime.now(UTC)

    record_launched(database, "r1", 1, {"pid": 99})
    record_launched(database, "r1", 1, {"pid": 100})  # not pending any more: nothing changes

    with database.session() as session:
        attempt = session.get(Attempt, ("r1", 1))
        assert attempt is not None
        assert (attempt.state, attempt.handle, attempt.launch_tries) == ("launched", {"pid": 99}, 1)
        assert attempt.launched_at is not None and attempt.launched_at >= before
    assert events(database) == [("job", "attempt 1 launched")]


def test_launch_failures_back_off_then_fail_the_run_with_the_start_sentence(
    database: Database,
) -> None:
    with database.session() as session:
        run = add_run(session, phase=Phase.PREPARING)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.PENDING)

    delays = []
    for _ in range(2):
        before = datetime.now(UTC)
        record_launch_failure(
            database, "r1", 1, "no such image", False, retries=2, base_seconds=2.0
        )
        with database.session() as session:
            attempt = session.get(Attempt, ("r1", 1))
            assert attempt is not None and attempt.next_try_at is not None
            assert attempt.state == "pending" and attempt.last_error == "no such image"
            delays.append((attempt.next_try_at - before).total_seconds())
    assert 2.0 <= delays[0] < 3.0 and 4.0 <= delays[1] < 5.0
    with database.session() as session:
        assert stored(session).phase == "PREPARING"

    record_launch_failure(database, "r1", 1, "no such image", False, retries=2, base_seconds=2.0)

    with database.session() as session:
        run = stored(session)
        attempt = session.get(Attempt, ("r1", 1))
        assert attempt is not None
        assert (attempt.state, attempt.outcome, attempt.launch_tries) == (
            "exited",
            "not-started",
            3,
        )
        assert run.phase == "FAILED"
    assert failure_reason(database) == (
        "this run's job could not be started on the training cluster\n"
        "3 tries; the last one said: no such image"
    )
    assert claims(database) == [("RELEASED", 1)]
    assert [m for k, m in events(database) if k == "job"] == [
        "launch of attempt 1 failed (no such image); retrying in 2 s",
        "launch of attempt 1 failed (no such image); retrying in 4 s",
    ]


def test_an_unreachable_cluster_fails_the_launch_with_its_own_sentence(database: Database) -> None:
    with database.session() as session:
        run = add_run(session, phase=Phase.PREPARING)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.PENDING)

    record_launch_failure(database, "r1", 1, "connection refused", True, retries=0, base_seconds=2)

    assert failure_reason(database) == (
        "the training cluster could not be reached while this run waited for its devices\n"
        "1 try; the last one said: connection refused"
    )


def test_a_stop_sent_is_remembered(database: Database) -> None:
    with database.session() as session:
        run = add_run(session)
        add_attempt(session, run, 1)

    record_stop_sent(database, "r1", 1)
    record_stop_sent(database, "r1", 7)  # an attempt that does not exist: nothing to remember

    attempt = view_of(database).attempt
    assert attempt is not None and attempt.stop_sent


def test_an_attempt_whose_job_is_gone_loses_its_tokens(database: Database) -> None:
    with database.session() as session:
        run = add_run(session)
        add_claim(session, run)
        add_attempt(session, run, 1)
        for _ in range(2):  # a launch tried twice mints twice
            create_job_token(session, "r1", 1, "maths")
        create_job_token(session, "r1", 2, "maths")  # another attempt's: kept
    crashed = Decision(
        rule=RuleName.FAIL,
        reason=FailureReason.JOB_CRASHED,
        attempt_exited=True,
        release_claim=True,
    )

    apply(database, view_of(database), crashed, NOW)

    with database.session() as session:
        tokens = session.scalars(select(Token).where(Token.run_id == "r1")).all()
        revoked = sorted((t.attempt, t.revoked_at is not None) for t in tokens)
    assert revoked == [(1, True), (1, True), (2, False)]


def test_a_retried_death_requeues_as_crashed_and_counts_towards_the_retries(
    database: Database,
) -> None:
    with database.session() as session:
        run = add_run(session)
        add_claim(session, run)
        add_attempt(session, run, 1)
    decision = Decision(
        rule=RuleName.REQUEUE,
        attempt_exited=True,
        release_claim=True,
        retry=True,
        note="died without a report (killed); it runs again",
    )

    apply(database, view_of(database), decision, NOW)

    with database.session() as session:
        run = stored(session)
        attempt = session.get(Attempt, ("r1", 1))
        assert attempt is not None
        assert run.phase == "QUEUED" and run.failure_code is None
        assert attempt.outcome == "crashed"
    assert ("job", "attempt 1 died without a report (killed); it runs again") in events(database)
    assert view_of(database).crashes == 1


def test_the_attempt_after_a_death_waits_for_its_back_off(database: Database) -> None:
    with database.session() as session:
        run = add_run(session, phase=Phase.QUEUED)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.EXITED, outcome=AttemptOutcome.CRASHED)
    view = view_of(database)
    assert view.crashes == 1
    decision = Decision(rule=RuleName.ADMIT, new_attempt=True, launch_delay=2.0)

    apply(database, view, decision, NOW)

    with database.session() as session:
        second = session.get(Attempt, ("r1", 2))
        assert second is not None
        assert second.next_try_at is not None
        assert second.next_try_at.replace(tzinfo=UTC) == NOW + timedelta(seconds=2)
    assert (
        "job",
        "attempt 2 launches in 2 s (back-off after 1 in a row that died without a report)",
    ) in events(database)


def test_views_read_together_are_each_runs_own_rows(database: Database) -> None:
    """A pass reads every open run's view in one go: each view holds its own run's current
    attempt, newest open claim and crashes in a row, never a neighbour's, in the order asked."""
    with database.session() as session:
        queued = add_run(session, "r-queued", phase=Phase.QUEUED)
        add_claim(session, queued, ClaimState.QUEUED)
        retried = add_run(session, "r-retried", phase=Phase.TRAINING)
        for number in (1, 2):
            add_attempt(
                session, retried, number, AttemptState.EXITED, outcome=AttemptOutcome.CRASHED
            )
        add_attempt(session, retried, 3)
        add_claim(session, retried, ClaimState.RELEASED)
        add_claim(session, retried)
        recovered = add_run(session, "r-recovered", phase=Phase.PREPARING)
        add_attempt(session, recovered, 1, AttemptState.EXITED, outcome=AttemptOutcome.CRASHED)
        add_attempt(session, recovered, 2, AttemptState.EXITED, outcome=AttemptOutcome.LOST)
        add_attempt(session, recovered, 3, AttemptState.PENDING)

    with database.session() as session:
        views = load_views(session, ["r-recovered", "gone", "r-queued", "r-retried"])

    assert [v.id for v in views] == ["r-recovered", "r-queued", "r-retried"]
    recovered_view, queued_view, retried_view = views
    assert queued_view.attempt is None
    assert (queued_view.claim_state, queued_view.crashes) == (ClaimState.QUEUED, 0)
    assert retried_view.attempt is not None
    assert (retried_view.attempt.number, retried_view.attempt.state) == (3, "launched")
    assert retried_view.attempt.handle == {"pid": 4242}
    assert (retried_view.claim_state, retried_view.crashes) == (ClaimState.GRANTED, 2)
    assert recovered_view.attempt is not None
    assert (recovered_view.attempt.number, recovered_view.attempt.state) == (3, "pending")
    assert (recovered_view.claim_state, recovered_view.crashes) == (None, 0)
    assert views == [view_of(database, r) for r in ("r-recovered", "r-queued", "r-retried")]
