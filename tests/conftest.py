"""Shared fixtures: the development models (built once), real trainer services, databases; and
the guards that keep the fast layer (`pytest -m "not slow"`) fast, described in `tests/layers.py`."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy import text

from akka_training.core.documents import deep_merge
from akka_training.devmodels.catalog import all_built
from akka_training.storage.db import Database
from akka_training.storage.models import Base
from akka_training.testing.app import InProcessTrainer
from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests import layers

# The Ray head fixtures (`ray_head`, `ray_head_factory`) for the Ray backend's tests, the S3
# endpoint (`s3_server`, `s3_bucket`) for the object storage tests; pytest's
# own `pytester` for the tests of the guards below.
pytest_plugins = ["tests.ray_cluster", "tests.s3_server", "pytester"]

REPO = Path(__file__).resolve().parents[1]
POSTGRES = os.environ.get("AKKA_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
# What undoes the guards this session put on our factories (restored when it ends).
_UNDO = pytest.StashKey[list[Callable[[], None]]]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a test that uses a fixture of the slow layer without the `slow` marker (or the
    Postgres server without `postgres`); first, so that `-m` has deselected nothing yet."""
    problems = layers.layer_problems(items)
    if problems:
        raise pytest.UsageError(layers.refusal(problems))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast layer does not import a module that is slow as a whole (`layers.module_is_slow`):
    it would deselect every test in it after paying for its imports."""
    if config.getoption("markexpr", "").strip() != "not slow" or collection_path.suffix != ".py":
        return None
    if collection_path.name.startswith("test_") and layers.module_is_slow(collection_path):
        return True
    return None


def pytest_configure(config: pytest.Config) -> None:
    # The Ray plugin is taken from the plugin manager: importing it here would keep pytest from
    # rewriting its asserts.
    ray_cluster = config.pluginmanager.get_plugin("tests.ray_cluster")
    assert ray_cluster is not None, "tests.ray_cluster is one of pytest_plugins"
    undo = [
        layers.guard(TrainerProcess, "start", "starts a trainer process"),
        layers.guard(ray_cluster.RayHead, "start", "starts a Ray head"),
    ]
    config.stash[_UNDO] = [u for u in undo if u is not None]


def pytest_unconfigure(config: pytest.Config) -> None:
    for undo in config.stash.get(_UNDO, []):
        undo()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    undo = layers.guard_training_loop()
    if undo is not None:
        item.config.stash[_UNDO].append(undo)
    with layers.running(item):
        return (yield)


@pytest.fixture(scope="session")
def dev_models() -> Path:
    """The development models, built once into a cache shared by every test (and kept between
    runs on this machine: the builder skips models it already built)."""
    target = Path(os.environ.get("AKKA_TEST_MODELS", REPO / ".cache" / "devmodels"))
    target.mkdir(parents=True, exist_ok=True)
    if all_built(target):
        return target
    builder = sys.modules.get("akka_training.devmodels.build")
    if builder is not None:
        # The training stack is loaded here already (a test module imported the builder): checking
        # the built models in this process is free, where a builder process would import it again.
        builder.build_dev_models(target)
        return target
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


# The pool of an in-process trainer unless a test gives its own: two CPU slots.
IN_PROCESS_POOL = {
    "name": "default",
    "accelerator": "cpu",
    "devices": 2,
    "max-claim": 2,
    "host-ram-gib": 16,
}


@pytest.fixture(scope="session")
def grafana_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One key to sign Grafana links for every in-process trainer (each would make its own)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = tmp_path_factory.mktemp("grafana") / "link-key.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


@pytest.fixture
def in_process_factory(
    database: Database,
    tmp_path_factory: pytest.TempPathFactory,
    dev_models: Path,
    grafana_key: Path,
) -> Iterator[Callable[..., InProcessTrainer]]:
    """In-process trainers (`akka_training.testing.app`) on this test's database, SQLite then
    Postgres, with the development catalog and `IN_PROCESS_POOL`; `settings` lay over that.
    Each is closed at the end of the test."""
    made: list[InProcessTrainer] = []

    def make(settings: dict[str, Any] | None = None) -> InProcessTrainer:
        base = {
            "trainer": {
                "database": {"url": database.url},
                "grafana": {"signing-key": str(grafana_key)},
                "pools": [IN_PROCESS_POOL],
            }
        }
        home = tmp_path_factory.mktemp("in-process")
        trainer = InProcessTrainer(home, deep_merge(base, settings or {}), dev_models=dev_models)
        made.append(trainer)
        return trainer

    yield make
    for trainer in made:
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
    """Drop a test's schema. A trainer of the test may still be writing to it (its fixture
    ends later), and Postgres may then pick the drop as a deadlock's victim: try again."""

    def drop() -> bool:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        return True

    until(
        drop,
        what=f"schema {schema} to drop",
        timeout=30,
        interval=0.2,
        ignoring=(psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable),
    )


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once; each test that needs a database gets a copy of it."""
    path = tmp_path_factory.mktemp("sqlite") / "migrated.db"
    db = Database(f"sqlite:///{path}")
    db.migrate()
    db.dispose()  # the last connection closing folds the write-ahead log into the file
    return path


@pytest.fixture(scope="session")
def migrated_postgres(postgres_server: str) -> Iterator[str]:
    """A schema of the test database migrated once; each test empties its tables first."""
    schema, url = postgres_schema_url(postgres_server)
    db = Database(url)
    db.migrate()
    db.dispose()
    yield url
    drop_schema(postgres_server, schema)


# The Postgres half is `slow` too: the fast layer runs every such test on SQLite, and the full
# suite on both (the Postgres half was a third of the fast layer's time).
@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow])]
)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A migrated database with no rows, once on SQLite and once on Postgres. The schema is
    migrated once per session (migrating for every test cost a third of a second on Postgres);
    `tests/storage/test_db.py` checks the migrations themselves."""
    if request.param == "sqlite":
        path = tmp_path / "test.db"
        shutil.copyfile(request.getfixturevalue("migrated_sqlite"), path)
        db = Database(f"sqlite:///{path}")
    else:
        db = Database(request.getfixturevalue("migrated_postgres"))
        empty_tables(db)
    yield db
    db.dispose()


def empty_tables(db: Database) -> None:
    """Delete every row the models hold (the migration's own bookkeeping stays) and restart the
    ids, as in a fresh schema. DELETE, not TRUNCATE: on tables this small it is ten times faster."""
    with db.engine.begin() as connection:
        for table in reversed(Base.metadata.sorted_tables):
            connection.execute(table.delete())
        for table in Base.metadata.sorted_tables:
            if table.autoincrement_column is not None:
                connection.execute(
                    text("SELECT setval(pg_get_serial_sequence(:table, :column), 1, false)"),
                    {"table": table.name, "column": table.autoincrement_column.name},
                )
