"""PAUSING: `save` waits for the job to snapshot at its next step and stop; `latest` stops the job
at once (its last committed snapshot is where it resumes)."""

from __future__ import annotations

from datetime import datetime

from akka_training.controller import job_state
from akka_training.controller.classify import classify_exit, retryable
from akka_training.controller.views import Decision, Limits, Probe, RunView
from akka_training.core.phases import RuleName
from akka_training.core.states import AttemptState, Request


def process(view: RunView, probe: Probe, now: datetime, limits: Limits) -> Decision:
    attempt = view.attempt
    if view.requested == Request.CANCEL:
        return job_state.cancel(view, probe)
    if attempt is None or attempt.state != AttemptState.LAUNCHED:
        return Decision(rule=RuleName.PAUSED, release_claim=True)
    status = probe.status
    if status is not None and status.state in ("exited", "missing"):
        if attempt.outcome is not None or attempt.stop_sent or status.state == "missing":
            return Decision(rule=RuleName.PAUSED, attempt_exited=True, release_claim=True)
        reason, detail = classify_exit(status, probe.log_tail)
        if retryable(reason):
            # It died before it could stop as asked: the run pauses at its last snapshot.
            return Decision(rule=RuleName.PAUSED, attempt_exited=True, release_claim=True)
        return Decision(
            rule=RuleName.FAIL,
            reason=reason,
            detail=detail,
            attempt_exited=True,
            release_claim=True,
        )
    if view.requested == Request.PAUSE_LATEST and not attempt.stop_sent:
        return Decision(stop_job=True)
    lingering = (
        attempt.outcome is not None
        and attempt.heartbeat_at is not None
        and (now - attempt.heartbeat_at).total_seconds() > limits.exit_grace_seconds
    )
    if lingering and not attempt.stop_sent:
        # It saved and said it stopped, but its process does not exit.
        return Decision(stop_job=True)
    return Decision()
