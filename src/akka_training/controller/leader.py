"""Which replica reconciles. On Postgres: whoever holds a session-level advisory lock (held on a
dedicated connection for the process's life). Elsewhere: a lease row renewed every pass."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.engine import Connection

from akka_training.storage.db import Database
from akka_training.storage.models import Lease

log = logging.getLogger(__name__)

LOCK_KEY = 0x616B6B61  # "akka"
LEASE_SECONDS = 15.0


class Leadership:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.holder = f"{uuid.uuid4().hex[:12]}"
        self._connection: Connection | None = None
        self.leading = False

    def hold(self) -> bool:
        leading = self._advisory() if self.db.dialect == "postgresql" else self._lease()
        if leading != self.leading:
            log.info("controller %s leadership", "took" if leading else "lost")
        self.leading = leading
        return leading

    def release(self) -> None:
        if self._connection is not None:
            try:
                self._connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_KEY})
                self._connection.close()
            except Exception:
                pass
            self._connection = None
        elif self.db.dialect != "postgresql":
            with self.db.session() as session:
                lease = session.get(Lease, "controller")
                if lease is not None and lease.holder == self.holder:
                    session.delete(lease)
        self.leading = False

    def _advisory(self) -> bool:
        try:
            if self._connection is not None:
                if self.leading:
                    self._connection.execute(text("SELECT 1"))
                    return True
            else:
                self._connection = self.db.engine.connect()
            got = self._connection.execute(
                text("SELECT pg_try_advisory_lock(:k)"), {"k": LOCK_KEY}
            ).scalar()
            self._connection.commit()
            return bool(got)
        except Exception:
            log.exception("the advisory lock connection failed")
            if self._connection is not None:
                try:
                    self._connection.close()
                except Exception:
                    pass
            self._connection = None
            return False

    def _lease(self) -> bool:
        now = datetime.now(UTC)
        with self.db.session() as session:
            lease = session.get(Lease, "controller", with_for_update=True)
            if lease is None:
                session.add(
                    Lease(
                        name="controller",
                        holder=self.holder,
                        expires_at=now + timedelta(seconds=LEASE_SECONDS),
                    )
                )
                return True
            if lease.holder == self.holder or lease.expires_at <= now:
                lease.holder = self.holder
                lease.expires_at = now + timedelta(seconds=LEASE_SECONDS)
                return True
            return False
