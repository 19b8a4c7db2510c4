"""How a task's job reports to the service: each report is posted when it is made (a task
reports a handful of times), retried with back-off while the service does not answer.

An answer of 409 (the service no longer runs this task) or a ``stop`` directive (it was
cancelled) raises `TaskCancelled`, which ends the job quietly.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from akka_training.core.reports import Placement
from akka_training.core.tasks import (
    TaskFailedReport,
    TaskFinishedReport,
    TaskProgressReport,
    TaskStartedReport,
)
from akka_training.engines.reporter import deliver

log = logging.getLogger(__name__)


class TaskCancelled(Exception):
    """The service told the task to stop (cancelled), or no longer knows it as running."""


class TaskReporter:
    def __init__(self, trainer_url: str, task_id: str, token: str, patience: float = 300.0):
        self._base = f"{trainer_url.rstrip('/')}/v1/tasks/{task_id}/reports"
        self._client = httpx.Client(
            headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(30.0)
        )
        self._patience = patience

    def started(self, placement: Placement) -> None:
        self._post("started", TaskStartedReport(placement=placement).to_json())

    def progress(
        self,
        message: str,
        done: float | None = None,
        total: float | None = None,
        address: str | None = None,
        key: str | None = None,
        engine: str | None = None,
    ) -> dict[str, Any]:
        """Report progress; the service's answer (a long-lived task's current `params`)."""
        report = TaskProgressReport(
            message=message, done=done, total=total, address=address, key=key, engine=engine
        )
        return self._post("progress", report.to_json())

    def finished(self, result: dict[str, Any]) -> None:
        self._post("finished", TaskFinishedReport(result=result).to_json())

    def failed(self, message: str, detail: str | None = None) -> None:
        self._post("failed", TaskFailedReport(message=message, detail=detail).to_json())

    def close(self) -> None:
        self._client.close()

    def _post(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        response = deliver(self._client, f"{self._base}/{kind}", kind, body, self._patience)
        if response.status_code == 409:
            raise TaskCancelled(response.text[:500])
        answer: dict[str, Any] = response.json()
        if answer.get("action") == "stop" and kind != "finished":
            raise TaskCancelled("the task was cancelled")
        return answer
