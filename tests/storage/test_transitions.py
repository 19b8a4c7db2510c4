"""State changes checked against the row as stored, on SQLite and Postgres: a change decided on
a read that another session has since overtaken is refused with the state as stored (a 409
sentence), never written over it; a pending cancel is never replaced by a pause; the listeners of
one database hear its own runs only.

Each test reads in one session, lets a second one change the row and commit, then makes the
first one's change: the window a request or a pass that did not lock would lose an update in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.core.errors import Conflict
from akka_training.core.failures import FailureReason
from akka_training.core.phases import Phase, RuleName
from akka_training.core.rules import IllegalTransition, MovedMeanwhile
from akka_training.core.states import (
    AttemptOutcome,
    AttemptRule,
    AttemptState,
    ClaimRule,
    ClaimState,
    PipelineRule,
    PipelineState,
    Request,
    TaskRule,
    TaskState,
)
from akka_training.storage.db import Database
from akka_training.storage.models import Attempt, Claim, Pipeline, Run, Task, Token
from akka_training.storage.tokens import create_task_token
from akka_training.storage.transitions import (
    current_claim,
    lock_run,
    move,
    move_attempt,
    move_claim,
    move_pipeline,
    move_task,
    record_outcome,
    release_claim,
    request,
    request_cancel,
)
from tests.controller.rows import T0, add_attempt, add_claim, add_run

LATER = T0 + timedelta(minutes=5)


def stored(session: Session, run_id: str = "r1") -> Run:
    run = session.get(Run, run_id)
    assert run is not None
    return run


def test_a_move_decided_on_a_stale_read_is_refused_with_the_phase_as_stored(
    database: Database,
) -> None:
    with database.session() as session:
        add_run(session)
    with database.session() as pausing:
        run = stored(pausing)  # TRAINING, read without a lock
        with database.session() as ending:
            move(ending, stored(ending), RuleName.COMPLETE, now=LATER)
        with pytest.raises(MovedMeanwhile) as refused:
            move(pausing, run, RuleName.REQUEST_PAUSE, request=Request.PAUSE_SAVE, now=LATER)
        assert isinstance(refused.value, Conflict)
        assert refused.value.message == (
            "Run r1 is now COMPLETED: it changed while this was being decided, and the rule "
            "'request-pause' was not applied."
        )
        assert run.phase == "COMPLETED"  # read again
    with database.session() as session:
        run = stored(session)
        assert (run.phase, run.requested, run.ended_at) == ("COMPLETED", None, LATER)


def test_a_run_that_left_a_phase_and_came_back_is_not_the_run_that_was_read(
    database: Database,
) -> None:
    with database.session() as session:
        add_run(session, phase=Phase.PAUSED)
    with database.session() as resuming:
        run = stored(resuming)
        with database.session() as other:
            again = stored(other)
            move(other, again, RuleName.RESUME, now=LATER)
            move(other, again, RuleName.PAUSE_WHILE_QUEUED, now=LATER + timedelta(seconds=1))
        # PAUSED as read, but since another moment: the resume read was overtaken.
        with pytest.raises(MovedMeanwhile, match=r"^Run r1 is now PAUSED: "):
            move(resuming, run, RuleName.RESUME, now=LATER)


def test_a_locked_read_is_the_run_as_stored(database: Database) -> None:
    with database.session() as session:
        add_run(session)
    with database.session() as session:
        run = stored(session)
        with database.session() as ending:
            move(ending, stored(ending), RuleName.FAIL, reason=FailureReason.JOB_CRASHED)
        assert run.phase == "TRAINING"
        locked = lock_run(session, "r1")
        assert locked is run and run.phase == "FAILED"
        assert lock_run(session, "r-unknown") is None


def test_a_pending_cancel_is_never_replaced_by_a_pause(database: Database) -> None:
    with database.session() as session:
        add_run(session)
        add_run(session, "r2")
    with database.session() as session:
        run = stored(session)
        assert request(session, run, Request.CANCEL)
        assert not request(session, run, Request.CANCEL)  # asked again: nothing changes
        cancelled = "Run r1 is being cancelled; a pause cannot undo the cancel asked before it."
        with pytest.raises(IllegalTransition) as refused:
            move(session, run, RuleName.REQUEST_PAUSE, request=Request.PAUSE_SAVE)
        assert refused.value.message == cancelled
        with pytest.raises(IllegalTransition) as refused:
            request(session, run, Request.PAUSE_LATEST)
        assert refused.value.message == cancelled
    with database.session() as pausing:
        run = stored(pausing, "r2")
        with database.session() as cancelling:
            request(cancelling, stored(cancelling, "r2"), Request.CANCEL)
        with pytest.raises(MovedMeanwhile) as refused:
            move(pausing, run, RuleName.REQUEST_PAUSE, request=Request.PAUSE_SAVE)
        assert refused.value.message == (
            "Run r2 is now TRAINING (cancel asked): it changed while this was being decided, "
            "and the rule 'request-pause' was not applied."
        )
    with database.session() as session:
        assert [stored(session, r).requested for r in ("r1", "r2")] == ["cancel", "cancel"]


def test_a_cancel_replaces_a_pause_and_an_ended_run_takes_no_request(database: Database) -> None:
    with database.session() as session:
        add_run(session)
        add_run(session, "r2", phase=Phase.COMPLETED)
    with database.session() as session:
        run = stored(session)
        move(session, run, RuleName.REQUEST_PAUSE, request=Request.PAUSE_SAVE)
        with pytest.raises(IllegalTransition) as refused:
            request(session, run, Request.PAUSE_LATEST)
        assert refused.value.message == (
            "Run r1 is pausing (pause-save asked); a pause does not replace that."
        )
        assert request(session, run, Request.CANCEL)
        with pytest.raises(IllegalTransition) as refused:
            request(session, stored(session, "r2"), Request.CANCEL)
        assert refused.value.message == "Run r2 is already COMPLETED."
    with database.session() as session:
        assert (stored(session).phase, stored(session).requested) == ("PAUSING", "cancel")


def test_a_claim_granted_meanwhile_is_released_as_granted(database: Database) -> None:
    with database.session() as session:
        run = add_run(session, phase=Phase.QUEUED)
        add_claim(session, run, ClaimState.QUEUED)
    with database.session() as cancelling:
        claim = current_claim(cancelling, "r1")
        assert claim is not None and claim.state == ClaimState.QUEUED
        with database.session() as admitting:
            granted = current_claim(admitting, "r1")
            assert granted is not None
            move_claim(admitting, granted, ClaimRule.GRANT, device_ids=[0], now=T0)
        release_claim(cancelling, stored(cancelling), claim, LATER)
    with database.session() as session:
        claim = session.scalars(select(Claim)).one()
        assert (claim.state, claim.released_at) == ("RELEASED", LATER)
        # Its devices were held from the grant on: five minutes of one device.
        assert stored(session).gpu_seconds == 300.0


def test_a_claim_released_meanwhile_is_not_granted(database: Database) -> None:
    with database.session() as session:
        run = add_run(session, phase=Phase.QUEUED)
        add_claim(session, run, ClaimState.QUEUED)
    with database.session() as admitting:
        claim = current_claim(admitting, "r1")
        assert claim is not None
        with database.session() as cancelling:
            release_claim(cancelling, stored(cancelling), current_claim(cancelling, "r1"))
        with pytest.raises(MovedMeanwhile) as refused:
            move_claim(admitting, claim, ClaimRule.GRANT, device_ids=[0])
        assert refused.value.message == (
            f"Claim {claim.id} is now RELEASED: it changed while this was being decided, and "
            "the rule 'grant' was not applied."
        )


def test_an_attempt_ends_once_and_keeps_the_end_its_job_reported(database: Database) -> None:
    with database.session() as session:
        run = add_run(session, phase=Phase.PREPARING)
        add_attempt(session, run, 1, AttemptState.PENDING)
        add_attempt(session, run, 2)
    with database.session() as launching:
        first = launching.get(Attempt, ("r1", 1))
        assert first is not None
        with database.session() as failing:
            attempt = failing.get(Attempt, ("r1", 1))
            assert attempt is not None
            move_attempt(failing, attempt, AttemptRule.EXIT, outcome=AttemptOutcome.NOT_STARTED)
        with pytest.raises(MovedMeanwhile, match=r"^Attempt 1 of run r1 is now exited: "):
            move_attempt(launching, first, AttemptRule.LAUNCH, handle={"pid": 1})
    with database.session() as session:
        second = session.get(Attempt, ("r1", 2))
        assert second is not None
        record_outcome(session, second, AttemptOutcome.FINISHED)
        with pytest.raises(IllegalTransition) as refused:
            record_outcome(session, second, AttemptOutcome.FAILED)
        assert refused.value.message == "Attempt 2 of run r1 has already ended (finished)."
        move_attempt(session, second, AttemptRule.EXIT, outcome=AttemptOutcome.CRASHED, now=LATER)
    with database.session() as session:
        ended = session.get(Attempt, ("r1", 2))
        assert ended is not None
        assert (ended.state, ended.outcome, ended.ended_at) == ("exited", "finished", LATER)


def test_a_task_ends_once_and_its_token_with_it(database: Database) -> None:
    with database.session() as session:
        add_run(session)  # its project
        session.add(Task(id="tk1", kind="merge", project="maths", pool="default", created_at=T0))
        session.flush()
        create_task_token(session, "tk1", "maths")
    with database.session() as reporting:
        task = reporting.get(Task, "tk1")
        assert task is not None
        with database.session() as cancelling:
            other = cancelling.get(Task, "tk1")
            assert other is not None
            move_task(cancelling, other, TaskRule.CANCEL, now=LATER)
        with pytest.raises(MovedMeanwhile) as refused:
            move_task(reporting, task, TaskRule.SUCCEED)
        assert refused.value.message == (
            "Task tk1 is now CANCELLED: it changed while this was being decided, and the rule "
            "'succeed' was not applied."
        )
        with pytest.raises(IllegalTransition) as ended:
            request_cancel(reporting, task)
        assert ended.value.message == "Task tk1 is already CANCELLED."
    with database.session() as session:
        task = session.get(Task, "tk1")
        assert task is not None
        assert (task.state, task.ended_at) == (TaskState.CANCELLED, LATER)
        assert session.scalars(select(Token.revoked_at).where(Token.task_id == "tk1")).one()


def test_a_pipeline_moved_meanwhile_is_not_ended_again(database: Database) -> None:
    with database.session() as session:
        add_run(session)  # its project
        session.add(Pipeline(id="p1", project="maths", plan={}, state=PipelineState.RUNNING))
    with database.session() as advancing:
        pipeline = advancing.get(Pipeline, "p1")
        assert pipeline is not None
        with database.session() as cancelling:
            other = cancelling.get(Pipeline, "p1")
            assert other is not None
            move_pipeline(cancelling, other, PipelineRule.CANCEL, failure="cancelled by request")
        with pytest.raises(MovedMeanwhile) as refused:
            move_pipeline(advancing, pipeline, PipelineRule.COMPLETE)
        assert refused.value.message == (
            "Pipeline p1 is now CANCELLED: it changed while this was being decided, and the "
            "rule 'complete' was not applied."
        )
        move_pipeline(advancing, pipeline, PipelineRule.RESUME)
    with database.session() as session:
        pipeline = session.get(Pipeline, "p1")
        assert pipeline is not None
        assert (pipeline.state, pipeline.failure, pipeline.ended_at) == ("RUNNING", None, None)


def test_a_failed_run_is_heard_by_its_own_database_s_listeners_only(database: Database) -> None:
    other = Database(database.url)
    heard: list[tuple[str, str]] = []
    overheard: list[tuple[str, str]] = []
    database.listeners.on_run_failed(lambda project, reason: heard.append((project, reason)))
    other.listeners.on_run_failed(lambda project, reason: overheard.append((project, reason)))
    try:
        with database.session() as session:
            run = add_run(session)
            move(session, run, RuleName.FAIL, reason=FailureReason.DEVICE_OOM, detail="OOM")
    finally:
        other.dispose()
    assert (heard, overheard) == ([("maths", FailureReason.DEVICE_OOM)], [])
