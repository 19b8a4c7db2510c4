"""PAUSED: the devices go back once the job is gone; `runs resume` queues the run again."""

from __future__ import annotations

from datetime import datetime

from akka_training.controller import terminal
from akka_training.controller.views import Decision, Limits, Probe, RunView


def process(view: RunView, probe: Probe, now: datetime, limits: Limits) -> Decision:
    return terminal.process(view, probe, now, limits)
