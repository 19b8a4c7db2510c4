"""The database handle: an engine, short sessions, and migrations on start.

Under load the handle keeps every request's wait for the database bounded:

- SQLite (one file, one writer at a time): write-ahead logging, so that readers never wait for
  the writer, and one write transaction at a time in this process (`WriteTurns`): a session
  takes the turn at its first write and gives it back when it commits or rolls back. Writers
  queue on a lock rather than on SQLite's own busy loop, which lets late comers overtake and
  starved ones time out.
- Both: a pool as large as the requests the service serves at once (plus its own threads),
  so that a request waits for a connection only when every worker is busy, and connections are
  kept rather than opened and closed per request.

A session that cannot get its turn or its connection within `wait_seconds` raises
`DatabaseBusy` (a `ServiceUnavailable`: the API answers 503 with ``Retry-After``); nothing of it
was written.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from akka_training.core.figures import json_safe
from akka_training.storage.errors import DatabaseBusy
from akka_training.storage.listeners import SESSION_KEY, Listeners

MIGRATIONS = Path(__file__).parent / "migrations"
# What a request waits for the database by default (trainer.database.wait-seconds).
DEFAULT_WAIT_SECONDS = 10.0
# Connections by default (trainer.database.pool-size unset): the server's worker threads
# (trainer.listen.worker-threads, 40 by default) and the service's own threads.
DEFAULT_POOL_SIZE = 44
# Connections beyond the pool for a moment (a session opened inside another one).
POOL_OVERFLOW = 10
# The statements that write; SQLite's driver begins its transaction before the first of them.
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")
_TURN = "akka_write_turn"


class Database:
    def __init__(
        self,
        url: str,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> None:
        self.url = normalise_url(url)
        self.wait_seconds = wait_seconds
        self.turns: WriteTurns | None = None
        if self.url.startswith("sqlite"):
            self.turns = WriteTurns(wait_seconds)
        self.engine = make_engine(self.url, wait_seconds, pool_size, self.turns)
        # Who hears of this database's state changes; each of its sessions carries them.
        self.listeners = Listeners()
        self._sessions = sessionmaker(
            self.engine, expire_on_commit=False, info={SESSION_KEY: self.listeners}
        )

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def migrate(self) -> None:
        """Bring the schema to the newest revision (idempotent)."""
        if self.url.startswith("sqlite:///"):
            Path(self.url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        with self.engine.begin() as connection:
            # Reading the migration scripts costs a tenth of a second; a schema at the newest
            # revision (every start but the first) needs only its version row read.
            current = set(MigrationContext.configure(connection).get_current_heads())
            if current == head_revisions():
                return
            config = alembic_config(self.url)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A short transaction: committed when the block ends, rolled back on an error."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        self.engine.dispose()


class WriteTurns:
    """One write transaction at a time on a SQLite database, in the order writers ask (as far
    as the lock's waiters are woken in order); a writer that waits longer than `wait_seconds`
    gets `DatabaseBusy`. The turn belongs to the connection, not to a thread: a request's
    session may write in one worker thread and commit in another."""

    def __init__(self, wait_seconds: float) -> None:
        self.wait_seconds = wait_seconds
        self._lock = threading.Lock()

    def take(self, info: dict[Any, Any]) -> None:
        if info.get(_TURN):
            return
        if not self._lock.acquire(timeout=self.wait_seconds):
            raise DatabaseBusy(
                f"The trainer's database is busy: this request waited {self.wait_seconds:g} s "
                "for its turn to write, and nothing of this request was saved; retry it in a "
                "moment (trainer.database.wait-seconds sets the wait)."
            )
        info[_TURN] = True

    def give_back(self, info: dict[Any, Any]) -> None:
        if info.pop(_TURN, False):
            self._lock.release()


def json_column(value: Any) -> str:
    """A JSON column's text: a non-finite figure (a NaN loss) as its text, which Postgres takes
    and every reader reads back as the number (`core.figures.json_safe`)."""
    return json.dumps(json_safe(value), allow_nan=False)


def normalise_url(url: str) -> str:
    """Accept postgres:// and postgresql:// URLs and use the psycopg 3 driver."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(
    url: str,
    wait_seconds: float = DEFAULT_WAIT_SECONDS,
    pool_size: int = DEFAULT_POOL_SIZE,
    turns: WriteTurns | None = None,
) -> Engine:
    kwargs: dict[str, Any] = {"future": True, "json_serializer": json_column}
    if url.startswith("sqlite"):
        # SQLite's own wait covers the writers of other processes (a migration, a second service
        # on the same file); this process's writers queue in `turns` first.
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": wait_seconds}
        if url.removeprefix("sqlite://") not in ("", "/:memory:"):
            # A file: SQLAlchemy's default pool (5 kept, 10 more opened and closed again)
            # would make most of the worker threads wait for a connection under load, and
            # open and set up a new one for many requests.
            # Beyond the pool, as many as asked for for a moment: a SQLite connection is a
            # file handle, not a server's slot, and what a writer waits for is its turn.
            kwargs.update(pool_size=pool_size, max_overflow=-1, pool_timeout=wait_seconds)
        engine = create_engine(url, **kwargs)
        _sqlite_events(engine, wait_seconds, turns)
        return engine
    kwargs.update(
        pool_pre_ping=True,
        pool_size=pool_size,
        max_overflow=POOL_OVERFLOW,
        pool_timeout=wait_seconds,
    )
    return create_engine(url, **kwargs)


def _sqlite_events(engine: Engine, wait_seconds: float, turns: WriteTurns | None) -> None:
    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(wait_seconds * 1000)}")
        cursor.close()

    if turns is None:
        return

    @event.listens_for(engine, "before_cursor_execute")
    def _take_turn(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip()[:7].upper().startswith(_WRITES):
            turns.take(conn.info)

    # The turn is given back when the connection returns to the pool, which a session's
    # connection does once its commit or rollback has run; or when a connection holding it is
    # invalidated.
    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_connection: Any, record: Any) -> None:
        turns.give_back(record.info)

    @event.listens_for(engine, "reset")
    def _reset(_dbapi_connection: Any, record: Any, _state: Any = None) -> None:
        turns.give_back(record.info)

    @event.listens_for(engine, "invalidate")
    def _invalidate(_dbapi_connection: Any, record: Any, _exc: Any) -> None:
        turns.give_back(record.info)


@functools.cache
def head_revisions() -> frozenset[str]:
    """The newest revision of each branch of the migrations this package ships."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return frozenset(ScriptDirectory.from_config(config).get_heads())


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config
