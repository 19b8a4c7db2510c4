"""COMPLETED, FAILED, CANCELLED (and PAUSED): make sure the job is gone, then release the
devices."""

from __future__ import annotations

from datetime import datetime

from akka_training.controller.views import Decision, Limits, Probe, RunView
from akka_training.core.states import AttemptState


def process(view: RunView, probe: Probe, now: datetime, limits: Limits) -> Decision:
    attempt = view.attempt
    if attempt is None or attempt.state != AttemptState.LAUNCHED:
        return Decision(release_claim=view.claim_state is not None)
    status = probe.status
    if status is None:
        return Decision()
    if status.state in ("exited", "missing"):
        return Decision(attempt_exited=True, release_claim=view.claim_state is not None)
    if attempt.stop_sent:
        return Decision()
    exiting = attempt.outcome is not None and attempt.heartbeat_at is not None
    if exiting and (now - attempt.heartbeat_at).total_seconds() < limits.exit_grace_seconds:  # type: ignore[operator]
        # The job reported its end and is exiting (flushing telemetry): give it time.
        return Decision()
    # The run ended (by a report or a request) but its process lingers.
    return Decision(stop_job=True)
