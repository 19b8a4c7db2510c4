"""A task's progress as a user reads it: an endpoint's address and key are the front door's."""

from __future__ import annotations

from akka_training.core.tasks import TaskProgressReport
from akka_training.server.services.tasks import progress_view


def test_a_user_reads_neither_the_endpoints_address_nor_its_key() -> None:
    stored = TaskProgressReport(message="serving", address="http://10.0.0.5:4000", key="k")
    view = progress_view(stored.to_json())
    assert view is not None
    assert view.model_dump() == {"message": "serving", "done": None, "total": None}
