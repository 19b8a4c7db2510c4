"""Reading a row as stored, and writing a state change only over the state it was decided on.

Two guards, for every stateful row (runs, tasks, pipelines, claims, attempts):

- `locked`: a request or a controller pass that decides on a row reads it locked, so that no one
  else changes it before this transaction ends: ``SELECT ... FOR UPDATE`` on Postgres. SQLite
  ignores FOR UPDATE; there a write that changes nothing comes first, which takes the database's
  write lock (and this process's write turn, `storage.db.WriteTurns`) until the commit, so that
  the read after it is the row as stored and stays so.
- `compare_and_set`: the move itself is ``UPDATE ... WHERE id = :id AND state = :as_read``, and
  a row that moved meanwhile (no row updated) is refused instead of written over, even where
  the caller did not lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from sqlalchemy import CursorResult, inspect, update
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.orm.attributes import set_committed_value

from akka_training.storage.models import Base

T = TypeVar("T", bound=Base)


def locked(
    session: Session, model: type[T], key: Any, touch: InstrumentedAttribute[Any]
) -> T | None:
    """`model`'s row `key` as stored, locked until this transaction ends (None if there is
    none). `touch`: a column of it that is not a key, written to itself on SQLite."""
    if session.get_bind().dialect.name == "sqlite":
        (pk,) = inspect(model).primary_key
        session.execute(
            update(model)
            .where(pk == key)
            .values({touch.key: touch})
            .execution_options(synchronize_session=False)
        )
    return session.get(model, key, with_for_update=True, populate_existing=True)


def compare_and_set(
    session: Session, row: Base, expected: Mapping[str, Any], values: Mapping[str, Any]
) -> bool:
    """Write `values` to `row`'s row only where its columns still hold `expected` (what the change
    was decided on); whether it did. `row` then holds the values as if it had been read so; when
    it did not, `row` is read again (the state as stored)."""
    model = type(row)
    state = inspect(row)
    if state.pending:
        session.flush([row])
    assert state.identity is not None, "a row that was read or flushed"
    where = [
        column == key for column, key in zip(state.mapper.primary_key, state.identity, strict=True)
    ]
    for name, value in expected.items():
        column = getattr(model, name)
        where.append(column.is_(None) if value is None else column == value)
    result = cast(
        CursorResult[Any],
        session.execute(
            update(model)
            .where(*where)
            .values(dict(values))
            .execution_options(synchronize_session=False)
        ),
    )
    if result.rowcount != 1:
        session.refresh(row)
        return False
    for name, value in values.items():
        set_committed_value(row, name, value)
    return True
