"""Shared fixtures: the development models (built once), real trainer services, databases."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from akka_training.storage.db import Database
from akka_training.testing.service import TrainerProcess

# The Ray head fixtures (`ray_head`, `ray_head_factory`) for the Ray backend's tests.
pytest_plugins = ["tests.ray_cluster"]

REPO = Path(__file__).resolve().parents[1]
POSTGRES = os.environ.get("AKKA_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def dev_models() -> Path:
    """The development models, built once into a cache shared by every test (and kept between
    runs on this machine: the builder skips models it already built)."""
    target = Path(os.environ.get("AKKA_TEST_MODELS", REPO / ".cache" / "devmodels"))
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "akka_training.devmodels", "build", str(target)],
        check=True,
        capture_output=True,
    )
    return target


@pytest.fixture
def trainer_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Start real trainer services; each is stopped (with its jobs) at the end of the test."""
    started: list[TrainerProcess] = []

    def make(
        settings: dict[str, Any] | None = None, start: bool = True, **kwargs: Any
    ) -> TrainerProcess:
        home = tmp_path_factory.mktemp("trainer")
        trainer = TrainerProcess(home, settings, **kwargs)
        started.append(trainer)
        return trainer.start() if start else trainer

    yield make
    for trainer in started:
        trainer.close()


@pytest.fixture(scope="session")
def postgres_server() -> str:
    try:
        with psycopg.connect(POSTGRES, connect_timeout=3):
            pass
    except psycopg.OperationalError as exc:
        pytest.fail(f"Postgres is not reachable at {POSTGRES}: {exc}")
    return POSTGRES


def postgres_schema_url(server: str) -> tuple[str, str]:
    """A fresh schema in the test database, and a URL whose connections use it."""
    schema = "akka_" + secrets.token_hex(4)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in server else "?"
    return schema, f"{server}{sep}options=-csearch_path%3D{schema}"


def drop_schema(server: str, schema: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A migrated database, once on SQLite and once on Postgres."""
    if request.param == "sqlite":
        db = Database(f"sqlite:///{tmp_path / 'test.db'}")
        db.migrate()
        yield db
        db.dispose()
        return
    server = request.getfixturevalue("postgres_server")
    schema, url = postgres_schema_url(server)
    db = Database(url)
    db.migrate()
    yield db
    db.dispose()
    drop_schema(server, schema)
