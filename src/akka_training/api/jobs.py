"""What a training job reports and what the service answers.

A job posts each report to ``/v1/jobs/{run}/attempts/{attempt}/{kind}``; `REPORTS` names the
body of each kind (the models live in `core.reports`, which the job builds them from). Every
answer is a `Directive`. A job gets its token once, at its start, from its bootstrap credential
(``POST /v1/jobs/bootstrap``): the answer is a `JobCredentials`.
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


class JobCredentials(ResponseBody):
    """The answer to a job's one bootstrap exchange (``POST /v1/jobs/bootstrap``): the token it
    reports with (its attempt's or its task's) and the environment that reaches the blob store
    (the standard AWS variables, when the trainer's settings hold them). The job keeps both in
    its own memory and environment, never on disk."""

    token: str
    env: dict[str, str]
