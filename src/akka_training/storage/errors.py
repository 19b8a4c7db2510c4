"""What the database's errors mean for the request that met them.

- Busy, not broken: the request may be sent again in a moment. `DatabaseBusy` is raised by the
  database handle itself (no write turn on SQLite in time); `busy_message` recognises the
  drivers' own busy errors (SQLite's lock, the Postgres pool's timeout, a serialisation failure
  or deadlock that Postgres resolved by aborting this transaction). The API answers 503 with
  ``Retry-After``.
- A value the database cannot hold whatever its size (`unstorable_message`: a NUL character in
  a Postgres text): the request is refused (400), as sending it again cannot help.

Anything else that fails a read or a write is a 500, never a 2xx.
"""

from __future__ import annotations

import sqlite3

import psycopg
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from akka_training.core.errors import ServiceUnavailable

# Seconds a client should wait before it sends a request the database was too busy for.
RETRY_AFTER_SECONDS = 2
# Postgres SQLSTATEs of a transaction aborted for contention: serialization_failure,
# deadlock_detected, lock_not_available, too_many_connections.
_PG_BUSY = {"40001", "40P01", "55P03", "53300"}


class DatabaseBusy(ServiceUnavailable):
    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after=RETRY_AFTER_SECONDS)


def busy_message(exc: SQLAlchemyError) -> str | None:
    """The sentence for a user when `exc` says the database was busy (retry later), else None."""
    if isinstance(exc, PoolTimeout):
        return (
            "The trainer's database is busy: no connection came free in time, and nothing of "
            "this request was saved; retry it in a moment (trainer.database.pool-size and "
            "trainer.database.wait-seconds set the pool and the wait)."
        )
    if not isinstance(exc, DBAPIError):
        return None
    orig = exc.orig
    if isinstance(orig, sqlite3.OperationalError) and "locked" in str(orig).lower():
        return (
            "The trainer's database is busy (SQLite: database is locked), and nothing of this "
            "request was saved; retry it in a moment."
        )
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate in _PG_BUSY:
        return (
            f"The trainer's database is busy (Postgres {sqlstate}: {str(orig).strip()}), and "
            "nothing of this request was saved; retry it in a moment."
        )
    return None


def unstorable_message(exc: SQLAlchemyError) -> str | None:
    """The sentence for a user when `exc` says a value of the request cannot be stored at all
    (so that the request is refused), else None."""
    if not isinstance(exc, DBAPIError):
        return None
    orig = exc.orig
    if isinstance(orig, psycopg.DataError) and "NUL (0x00)" in str(orig):
        return (
            "A text of this request holds a NUL character (\\u0000), which the trainer's "
            "database cannot store; remove it and send the request again."
        )
    return None
