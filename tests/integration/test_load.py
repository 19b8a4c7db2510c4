"""Many users at once, through the real service: concurrent submissions and cancels on SQLite
and on Postgres are all answered 2xx (the write path queues them instead of failing them), no
submission makes two runs, and the claims agree with the runs afterwards."""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from akka_training.core.states import OPEN_CLAIM_STATES, ClaimState
from akka_training.storage.db import Database
from akka_training.storage.models import Claim, Run
from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests.conftest import drop_schema, postgres_schema_url
from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    scripted_settings,
    sft_plan,
    write_plan,
)

pytestmark = pytest.mark.slow

SUBMISSIONS = 100
# Twenty of the hundred repeat another's submissionId (a retry racing its original).
DISTINCT = 80
CANCELS = 50
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
        return
    server = request.getfixturevalue("postgres_server")
    schema, url = postgres_schema_url(server)
    yield url
    drop_schema(server, schema)


def test_a_hundred_submissions_and_fifty_cancels_at_once_are_all_answered(
    trainer_factory: Any, database_url: str | None
) -> None:
    extra: dict[str, Any] = {"pools": [{"name": "default", "accelerator": "cpu", "devices": 2}]}
    if database_url is not None:
        extra["database"] = {"url": database_url}
    trainer: TrainerProcess = trainer_factory(
        scripted_settings(**extra), env={"AKKA_SCRIPTED_STEP_SECONDS": "0.2"}
    )
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")

    plans = [
        sft_plan("maths", "maths/train", steps=1000, submissionId=f"load-{i % DISTINCT}")
        for i in range(SUBMISSIONS)
    ]
    started = _all_at_once(trainer, [("POST", "/v1/runs", plan) for plan in plans])
    assert _statuses(started) == {200: SUBMISSIONS}, _failures(started)
    by_submission: dict[str, set[str]] = {}
    for plan, response in zip(plans, started, strict=True):
        by_submission.setdefault(plan["submissionId"], set()).add(response.json()["id"])
    assert len(by_submission) == DISTINCT
    assert all(len(ids) == 1 for ids in by_submission.values()), by_submission
    run_ids = sorted({next(iter(ids)) for ids in by_submission.values()})

    cancelled = run_ids[:CANCELS]
    answers = _all_at_once(trainer, [("POST", f"/v1/runs/{r}/cancel", None) for r in cancelled])
    assert _statuses(answers) == {200: CANCELS}, _failures(answers)

    db = Database(database_url or f"sqlite:///{trainer.home / 'trainer.db'}")
    try:
        with db.session() as session:
            runs = session.scalars(select(Run).where(Run.project == "maths")).all()
            assert len(runs) == DISTINCT
            assert Counter(r.submission_id for r in runs).most_common(1)[0][1] == 1
        _wait_until_cancelled(db, cancelled)
        _assert_claims_agree_with_runs(db, devices=2)
    finally:
        db.dispose()


def test_the_client_and_the_cli_send_a_submission_again_while_the_database_is_busy(
    trainer_factory: Any,
) -> None:
    trainer: TrainerProcess = trainer_factory(scripted_settings(database={"wait-seconds": 0.5}))
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    database = trainer.home / "trainer.db"
    with trainer.client() as client:
        # What a first submission builds once (its checks) is built before the clock starts,
        # so that each submission below meets the held database at least once however slow
        # the machine is.
        client.start_run(sft_plan("maths", "maths/train"), dry_run=True)

    with _written_by_another_process(database, seconds=4.0), trainer.client() as client:
        run = client.start_run(sft_plan("maths", "maths/train", submissionId="busy-client"))
    # Answered 503 (Retry-After: 2) until the database was free again, then created.
    assert trainer.log().count("database busy on POST /v1/runs") >= 1
    assert run.existing is False

    path = write_plan(trainer, sft_plan("maths", "maths/train", submissionId="busy-cli"))
    with _written_by_another_process(database, seconds=4.0):
        started = trainer.cli_json("training", "runs", "start", "-f", str(path))
    assert started["id"] != run.id

    assert trainer.log().count("database busy on POST /v1/runs") >= 2
    with trainer.client() as client:
        assert sorted(r.id for r in client.runs(project="maths")) == sorted([run.id, started["id"]])


@contextmanager
def _written_by_another_process(database: Path, seconds: float) -> Iterator[None]:
    """Hold SQLite's write lock from outside the service (as a second writer of the file
    would) for `seconds`, then let go while the block still runs."""
    connection = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
    connection.execute("BEGIN IMMEDIATE")
    release = threading.Timer(seconds, connection.rollback)
    release.start()
    try:
        yield
    finally:
        release.join()
        connection.close()


def _all_at_once(
    trainer: TrainerProcess, requests: list[tuple[str, str, Any]]
) -> list[httpx.Response]:
    """Send every request at the same moment, each on its own connection."""
    headers = {"Authorization": f"Bearer {trainer.admin_token}"}

    def send(item: tuple[str, str, Any]) -> httpx.Response:
        method, path, body = item
        with httpx.Client(base_url=trainer.url, headers=headers, timeout=120) as http:
            return http.request(method, path, json=body)

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(send, requests))


def _statuses(responses: list[httpx.Response]) -> dict[int, int]:
    return dict(Counter(r.status_code for r in responses))


def _failures(responses: list[httpx.Response]) -> list[str]:
    return [f"{r.status_code} {r.text[:300]}" for r in responses if r.status_code >= 300][:5]


def _wait_until_cancelled(db: Database, run_ids: list[str], timeout: float = 120.0) -> None:
    """A cancelled run that had a job ends once its job is gone."""
    phases: Counter[str] = Counter()

    def all_cancelled() -> bool:
        with db.session() as session:
            rows = session.execute(select(Run.phase).where(Run.id.in_(run_ids))).scalars()
            phases.clear()
            phases.update(rows)
        return set(phases) <= {"CANCELLED"}

    until(
        all_cancelled,
        what="every run to be cancelled",
        timeout=timeout,
        interval=0.5,
        detail=lambda: f"phases: {dict(phases)}",
    )


def _assert_claims_agree_with_runs(db: Database, devices: int) -> None:
    """Each open run holds one open claim, each ended run none, and the granted devices fit."""
    with db.session() as session:
        runs = {r.id: r for r in session.scalars(select(Run))}
        claims = session.scalars(select(Claim)).all()
        open_by_run = Counter(c.run_id for c in claims if c.state in OPEN_CLAIM_STATES)
        for run_id, run in runs.items():
            expected = 0 if run.phase in TERMINAL or run.phase == "PAUSED" else 1
            assert open_by_run.get(run_id, 0) == expected, (run_id, run.phase)
        granted = sum(c.devices for c in claims if c.state == ClaimState.GRANTED)
        assert granted <= devices
