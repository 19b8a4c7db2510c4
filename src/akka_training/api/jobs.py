"""What a training job reports and what the service answers.

A job posts each report to ``/v1/jobs/{run}/attempts/{attempt}/{kind}``; `REPORTS` names the
body of each kind (the models live in `core.reports`, which the job builds them from). Every
answer is a `Directive`.
"""

from __future__ import annotations

from pydantic import BaseModel

from akka_training.api.base import ResponseBody
from akka_training.core.reports import (
    Action,
    BatchReport,
    FailedReport,
    FinishedReport,
    HeartbeatReport,
    RolloutsReport,
    SnapshotReport,
    StartedReport,
    StepReport,
    StoppedReport,
    TrainingReport,
)

REPORTS: dict[str, type[BaseModel]] = {
    "started": StartedReport,
    "training": TrainingReport,
    "steps": StepReport,
    "snapshots": SnapshotReport,
    "rollouts": RolloutsReport,
    "heartbeat": HeartbeatReport,
    "finished": FinishedReport,
    "stopped": StoppedReport,
    "failed": FailedReport,
    "batch": BatchReport,
}


class Directive(ResponseBody):
    """continue; save-and-stop (a pause with --checkpoint save); or stop (a cancel, or a pause
    at the latest snapshot)."""

    action: Action
