"""One controller leads: an advisory lock on Postgres, a lease row elsewhere."""

from akka_training.controller.leader import Leadership
from akka_training.storage.db import Database


def test_only_one_controller_leads_at_a_time(database: Database) -> None:
    # On Postgres a second replica has its own engine (its own connections).
    other = Database(database.url) if database.dialect == "postgresql" else database
    try:
        first, second = Leadership(database), Leadership(other)
        assert first.hold()
        assert first.hold()  # holding again keeps it
        assert not second.hold()
        first.release()
        assert second.hold()
        second.release()
    finally:
        if other is not database:
            other.dispose()
