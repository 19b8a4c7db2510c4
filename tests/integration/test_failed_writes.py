"""A step report the database fails to save is answered 5xx, so that the job sends it again
until it is kept: a real service, a real job, on SQLite and on Postgres (where the failure comes
at the commit, after the handler has returned)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from akka_training.storage.db import Database
from akka_training.testing.waiting import until
from tests.conftest import drop_schema, postgres_schema_url
from tests.db_faults import steps_refused
from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    scripted_settings,
    sft_plan,
    start_run,
    steps_of,
    wait_phase,
)

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
        return
    server = request.getfixturevalue("postgres_server")
    schema, url = postgres_schema_url(server)
    yield url
    drop_schema(server, schema)


def test_steps_that_failed_to_save_are_sent_again_and_none_is_lost(
    trainer_factory: Any, database_url: str | None
) -> None:
    extra = {"database": {"url": database_url}} if database_url else {}
    trainer = trainer_factory(scripted_settings(**extra), env={"AKKA_SCRIPTED_STEP_SECONDS": "0.3"})
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=10))
    wait_phase(trainer, run, "TRAINING")
    db = Database(database_url or f"sqlite:///{trainer.home / 'trainer.db'}")
    try:
        with steps_refused(db):
            # Several steps' reports fail to save meanwhile.
            until(
                lambda: trainer.log().count("database error on POST /v1/jobs/") >= 3,
                what="three step reports to fail to save",
                timeout=120,
                interval=0.2,
            )
    finally:
        db.dispose()
    done = wait_phase(trainer, run, "COMPLETED", "FAILED")
    assert done.phase == "COMPLETED", done.failure
    assert steps_of(trainer, run) == list(range(1, 11))
