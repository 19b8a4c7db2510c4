"""The schema migrates and round-trips rows on SQLite and on Postgres."""

from datetime import UTC, datetime

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import select

from akka_training.storage.db import Database
from akka_training.storage.models import Base, Project, Run, Token


def test_migrations_are_idempotent_and_rows_round_trip(database: Database) -> None:
    database.migrate()  # a second time changes nothing
    with database.session() as s:
        s.add(Project(name="maths", quota=2))
        s.add(Token(id="t1", name="x", kind="project", hash="h" * 64, projects=["maths"]))
    with database.session() as s:
        project = s.get(Project, "maths")
        assert project is not None and project.quota == 2
        assert project.created_at.tzinfo is not None
        token = s.scalar(select(Token).where(Token.hash == "h" * 64))
        assert token is not None and token.projects == ["maths"]


def test_json_columns_and_timestamps(database: Database) -> None:
    with database.session() as s:
        s.add(Project(name="p"))
        s.add(
            Run(
                id="r1",
                project="p",
                method="sft",
                engine="trl",
                base_model="m",
                dataset="p/d:v1",
                pool="default",
                gpus=1,
                plan={"kind": "run"},
                settings={"a": [1, 2]},
                phase="QUEUED",
                phase_since=datetime(2026, 1, 1, tzinfo=UTC),
            )
        )
    with database.session() as s:
        run = s.get(Run, "r1")
        assert run is not None
        assert run.settings == {"a": [1, 2]}
        assert run.phase_since == datetime(2026, 1, 1, tzinfo=UTC)


def test_a_failed_transaction_leaves_nothing(database: Database) -> None:
    try:
        with database.session() as s:
            s.add(Project(name="q"))
            s.flush()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    with database.session() as s:
        assert s.get(Project, "q") is None


def test_the_migrations_build_exactly_the_models(database: Database) -> None:
    with database.engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
