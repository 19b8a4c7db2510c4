"""Faults put into a real database by the tests: a table that refuses new rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text

from akka_training.storage.db import Database

REFUSAL = "the steps table refuses rows"


@contextmanager
def steps_refused(db: Database) -> Iterator[None]:
    """A trigger that refuses new step rows while the block runs: on Postgres when the
    transaction commits (a deferred constraint trigger), on SQLite when the row is written."""
    if db.dialect == "sqlite":
        statements = [
            "CREATE TRIGGER refuse_steps BEFORE INSERT ON steps "
            f"BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
        ]
        undo = ["DROP TRIGGER refuse_steps"]
    else:
        statements = [
            "CREATE FUNCTION refuse_steps() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{REFUSAL}'; END $$",
            "CREATE CONSTRAINT TRIGGER refuse_steps AFTER INSERT ON steps "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_steps()",
        ]
        undo = ["DROP TRIGGER refuse_steps ON steps", "DROP FUNCTION refuse_steps()"]
    with db.engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement))
    try:
        yield
    finally:
        with db.engine.begin() as connection:
            for statement in undo:
                connection.execute(text(statement))
