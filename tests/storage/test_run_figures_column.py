"""`runs.summary` holds a `RunFigures` as the JSON rows have always held: a row written before
the model reads back as one, a row without it reads as none, and an assigned value is kept."""

from __future__ import annotations

import json

from sqlalchemy import text

from akka_training.core.figures import Figures
from akka_training.core.run_figures import RunFigures
from akka_training.storage.db import Database
from akka_training.storage.models import Run
from tests.controller.rows import add_run
from tests.core.test_run_figures import STORED


def test_a_row_written_before_the_model_reads_back_as_its_figures(database: Database) -> None:
    with database.session() as session:
        add_run(session, "r1")
        add_run(session, "r2")
    with database.engine.begin() as connection:
        connection.execute(
            text("UPDATE runs SET summary = :summary WHERE id = 'r1'"),
            {"summary": json.dumps(STORED)},
        )
        connection.execute(text("UPDATE runs SET summary = NULL WHERE id = 'r2'"))
    with database.session() as session:
        old, empty = session.get(Run, "r1"), session.get(Run, "r2")
        assert old is not None and empty is not None
        assert old.summary == RunFigures.model_validate(STORED)
        assert old.summary.monitor_pause is not None
        assert empty.summary == RunFigures()


def test_new_figures_assigned_to_a_run_are_kept(database: Database) -> None:
    with database.session() as session:
        run = add_run(session, "r1")
        assert run.summary == RunFigures()  # a new run starts with none
        run.summary = run.summary.with_step(1, Figures.of({"loss": 1.5}), "sft")
    with database.session() as session:
        stored = session.get(Run, "r1")
        assert stored is not None and stored.summary.loss == 1.5
    with database.engine.connect() as connection:
        raw = connection.execute(text("SELECT summary FROM runs WHERE id = 'r1'")).scalar_one()
    assert (json.loads(raw) if isinstance(raw, str) else raw)["loss"] == 1.5
