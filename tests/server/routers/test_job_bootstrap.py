"""A job's one bootstrap exchange (``POST /v1/jobs/bootstrap``): its launch carries only a
one-time credential, which answers once with the attempt's token and the store's credentials."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx

from akka_training.controller.launch import prepare_launch
from akka_training.core.phases import Phase
from akka_training.core.states import AttemptOutcome, AttemptState
from akka_training.storage.tokens import create_bootstrap_token
from akka_training.testing.app import InProcessTrainer
from tests.controller.rows import add_attempt, add_claim, add_run

SPENT = (
    "This bootstrap credential is not known to this trainer, or was already exchanged; a job "
    "exchanges it once, at its start."
)
STORE = {
    "trainer": {
        "storage": {"s3": {"access-key-id": "AKIDBOOT", "secret-access-key": "store-secret-1"}}
    }
}


def pending_attempt(trainer: InProcessTrainer) -> None:
    """Run r1 with its first attempt pending and its devices granted."""
    with trainer.ctx.db.session() as session:
        run = add_run(session, phase=Phase.PREPARING)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.PENDING)


def bootstrap_of(trainer: InProcessTrainer) -> str:
    request = prepare_launch(trainer.ctx, "r1", 1)
    assert request is not None
    return request.env["AKKA_JOB_BOOTSTRAP"]


def exchange(trainer: InProcessTrainer, bootstrap: str) -> httpx.Response:
    return trainer.client(bootstrap).post("/v1/jobs/bootstrap")


def test_the_launch_holds_neither_the_token_nor_the_store_secret(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory(STORE)
    pending_attempt(trainer)
    request = prepare_launch(trainer.ctx, "r1", 1)
    assert request is not None

    assert "store-secret-1" not in str(request.env) + str(request.job_spec)
    assert sorted(request.env) == ["AKKA_JOB_BOOTSTRAP", "TRACEPARENT"]


def test_the_exchange_answers_once_with_a_token_that_reports_for_the_attempt(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory(STORE)
    pending_attempt(trainer)
    bootstrap = bootstrap_of(trainer)

    first = exchange(trainer, bootstrap)
    again = exchange(trainer, bootstrap)

    assert first.status_code == 200
    answer = first.json()
    assert sorted(answer) == ["env", "token"]
    assert answer["env"] == {
        "AWS_ACCESS_KEY_ID": "AKIDBOOT",
        "AWS_SECRET_ACCESS_KEY": "store-secret-1",
    }
    job = trainer.client(answer["token"])
    beat = job.post("/v1/jobs/r1/attempts/1/heartbeat", json={"step": 0})
    assert (beat.status_code, beat.json()) == (200, {"action": "continue"})
    assert (again.status_code, again.json()["error"]) == (
        401,
        {"code": "unauthorized", "message": SPENT},
    )


def test_a_bootstrap_credential_does_nothing_but_the_exchange(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory()
    pending_attempt(trainer)
    holder = trainer.client(bootstrap_of(trainer))

    read = holder.get("/v1/runs/r1")
    report = holder.post("/v1/jobs/r1/attempts/1/heartbeat", json={"step": 0})

    assert (read.status_code, read.json()["error"]["message"]) == (
        403,
        "A bootstrap credential is only exchanged for its job's token (POST /v1/jobs/bootstrap).",
    )
    assert (report.status_code, report.json()["error"]["message"]) == (
        403,
        "This token reports for another run or attempt.",
    )


def test_an_expired_bootstrap_credential_is_refused(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory()
    pending_attempt(trainer)
    lifetime = timedelta(seconds=trainer.settings.trainer.controller.bootstrap_seconds)
    with trainer.ctx.db.session() as session:
        late = create_bootstrap_token(
            session,
            "maths",
            datetime.now(UTC) - lifetime - timedelta(seconds=1),
            lifetime,
            run_id="r1",
            attempt=1,
        )

    answer = exchange(trainer, late)

    assert (answer.status_code, answer.json()["error"]["message"]) == (
        401,
        "This bootstrap credential has expired: the job started later than "
        "trainer.controller.bootstrap-seconds after its launch.",
    )


def test_the_bootstrap_credential_of_an_ended_attempt_is_refused(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory()
    with trainer.ctx.db.session() as session:
        run = add_run(session, phase=Phase.PREPARING)
        add_attempt(session, run, 1, AttemptState.EXITED, outcome=AttemptOutcome.FAILED)
        add_attempt(session, run, 2, AttemptState.PENDING)
        stale = create_bootstrap_token(
            session, "maths", datetime.now(UTC), timedelta(minutes=10), run_id="r1", attempt=1
        )

    answer = exchange(trainer, stale)

    assert (answer.status_code, answer.json()["error"]["message"]) == (
        409,
        "Attempt 1 of run r1 is no longer current; stop.",
    )


def test_an_attempt_that_ends_takes_its_unexchanged_bootstrap_credential_with_it(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory()
    pending_attempt(trainer)
    first = bootstrap_of(trainer)  # a launch try whose job never started
    retried = prepare_launch(trainer.ctx, "r1", 1)
    assert retried is not None
    job = trainer.job_client(retried)
    failed = job.post("/v1/jobs/r1/attempts/1/failed", json={"code": "job-crashed", "detail": "x"})
    assert failed.status_code == 200, failed.text

    answer = exchange(trainer, first)

    assert (answer.status_code, answer.json()["error"]["message"]) == (401, SPENT)
