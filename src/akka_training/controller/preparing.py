"""PREPARING: devices held; the job is launched, then loads and tokenises."""

from __future__ import annotations

from datetime import datetime

from akka_training.controller import job_state
from akka_training.controller.views import Decision, Limits, Probe, RunView
from akka_training.core.states import Request


def process(view: RunView, probe: Probe, now: datetime, limits: Limits) -> Decision:
    if view.requested == Request.CANCEL:
        return job_state.cancel(view, probe)
    if job_state.launch_due(view, now):
        return Decision(launch=True)
    return job_state.ended(view, probe, limits) or Decision()
