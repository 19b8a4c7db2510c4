"""What a request answers when the database fails it, on SQLite and on Postgres: 503 with
Retry-After when it could not get the database in time (nothing of it saved), 5xx (never 200)
when its commit fails, so that a job's reporter sends the report again, and 400 for a value the
database cannot store at all."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest
from sqlalchemy import text, update

from akka_training.storage.db import POOL_OVERFLOW
from akka_training.storage.models import Project
from akka_training.testing.app import InProcessTrainer
from tests.db_faults import REFUSAL, steps_refused
from tests.server.routers.helpers import chat_rows, register, sft_plan

WAIT = 0.5
BUSY = {
    "sqlite": "The trainer's database is busy: this request waited 0.5 s for its turn to write, "
    "and nothing of this request was saved; retry it in a moment "
    "(trainer.database.wait-seconds sets the wait).",
    "postgresql": "The trainer's database is busy: no connection came free in time, and nothing "
    "of this request was saved; retry it in a moment (trainer.database.pool-size and "
    "trainer.database.wait-seconds set the pool and the wait).",
}


@pytest.fixture
def trainer(in_process_factory: Callable[..., InProcessTrainer]) -> InProcessTrainer:
    return in_process_factory(
        {
            "trainer": {
                "projects": [{"name": "maths", "quota": 2}],
                "database": {"wait-seconds": WAIT, "pool-size": 1},
            }
        }
    )


@pytest.fixture
def api(trainer: InProcessTrainer) -> httpx.Client:
    client = trainer.client()
    register(client, "maths/train", chat_rows(12))
    return client


def test_a_submission_that_cannot_get_the_database_in_time_answers_503_with_retry_after(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    with _database_taken(trainer):
        began = time.monotonic()
        response = api.post("/v1/runs", json=sft_plan(submissionId="busy-1"))
        waited = time.monotonic() - began
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "2"
    assert response.json()["error"] == {
        "code": "unavailable",
        "message": BUSY[trainer.ctx.db.dialect],
    }
    # It waited its turn before it gave up (a loaded machine only makes that longer).
    assert waited >= WAIT * 0.8
    assert api.get("/v1/runs").json() == []
    # Once the database is free the same submission goes through, once.
    first = api.post("/v1/runs", json=sft_plan(submissionId="busy-1"))
    again = api.post("/v1/runs", json=sft_plan(submissionId="busy-1"))
    assert first.status_code == again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    assert len(api.get("/v1/runs").json()) == 1


def test_a_step_report_whose_commit_fails_is_answered_5xx_and_saved_when_sent_again(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    run_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    launch = trainer.admit(run_id)
    job = trainer.job_client(launch)
    report = f"/v1/jobs/{run_id}/attempts/{launch.attempt}/steps"
    body = {"step": 1, "metrics": {"loss": 1.25}}
    with steps_refused(trainer.ctx.db):
        response = job.post(report, json=body)
    assert response.status_code == 500, response.text
    message = response.json()["error"]["message"]
    assert message.startswith(
        "The trainer could not read or save this request in its database, and nothing of it "
        "was saved:"
    )
    assert REFUSAL in message
    assert api.get(f"/v1/runs/{run_id}/metrics").json()["steps"] == []
    # The reporter sends it again: now it is kept.
    assert job.post(report, json=body).status_code == 200
    steps = api.get(f"/v1/runs/{run_id}/metrics").json()["steps"]
    assert [(s["step"], s["loss"]) for s in steps] == [(1, 1.25)]


def test_a_text_the_database_cannot_store_is_refused_and_saves_nothing(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    response = api.post("/v1/runs", json=sft_plan(description="nightly\u0000run"))
    if trainer.ctx.db.dialect == "sqlite":
        # SQLite stores it as it came.
        assert response.status_code == 200, response.text
        assert (
            api.get(f"/v1/runs/{response.json()['id']}").json()["description"] == "nightly\u0000run"
        )
        return
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "code": "invalid",
        "message": "A text of this request holds a NUL character (\\u0000), which the trainer's "
        "database cannot store; remove it and send the request again.",
    }
    assert api.get("/v1/runs").json() == []


@contextmanager
def _database_taken(trainer: InProcessTrainer) -> Iterator[None]:
    """Everything a request would wait for, held by someone else: on SQLite the write turn (a
    write transaction left open), on Postgres every connection of the pool."""
    db = trainer.ctx.db
    with ExitStack() as held:
        if db.dialect == "sqlite":
            connection = held.enter_context(db.engine.connect())
            connection.execute(update(Project).values(quota=Project.quota))
            held.callback(connection.rollback)
        else:
            for _ in range(1 + POOL_OVERFLOW):
                held.enter_context(db.engine.connect()).execute(text("SELECT 1"))
        yield
