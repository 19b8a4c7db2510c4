"""Who hears of state changes beside the rows (the service's telemetry counts failed runs).

The listeners belong to one `Database` (so to one application: two in one process hear only
their own runs), and every session of that database carries them (`of`), so that a move reaches
them without a module-wide registry and without threading them through every caller.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from akka_training.core.failures import FailureReason

# The key of `Session.info` under which a database's sessions carry its listeners.
SESSION_KEY = "akka_training.listeners"

RunFailed = Callable[[str, FailureReason], None]


class Listeners:
    def __init__(self) -> None:
        self._run_failed: list[RunFailed] = []

    def on_run_failed(self, listener: RunFailed) -> None:
        """Call `listener(project, reason)` whenever a run fails."""
        self._run_failed.append(listener)

    def remove(self, listener: RunFailed) -> None:
        if listener in self._run_failed:
            self._run_failed.remove(listener)

    def run_failed(self, project: str, reason: FailureReason) -> None:
        for listener in list(self._run_failed):
            listener(project, reason)


def of(session: Session) -> Listeners | None:
    """The listeners of the database `session` belongs to (None for a session made elsewhere)."""
    found = session.info.get(SESSION_KEY)
    return found if isinstance(found, Listeners) else None
