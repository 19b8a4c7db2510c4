"""Run phases and the named rules that move a run between them.

Every phase change in the product goes through `transition()` (applied to the row as stored by
`storage.transitions.move`). A rule names the phases it moves from and the phase it moves to;
asking for a move that no rule allows raises `IllegalTransition` (a `Conflict`), so a bug or a
lost race shows up as a refusal instead of a run in an impossible state.

What a user asked of an open run and the controller has not finished doing (`Request`: cancel,
or a pause) is part of the run's state too: `may_request` says which request may take the place
of the pending one, so that a pause never undoes a cancel that was already answered.
"""

from __future__ import annotations

from enum import StrEnum

from akka_training.core.rules import IllegalTransition, Rules, rule
from akka_training.core.states import Request

__all__ = [
    "RULES",
    "TERMINAL",
    "IllegalTransition",
    "Phase",
    "RuleName",
    "can",
    "may_request",
    "transition",
]


class Phase(StrEnum):
    QUEUED = "QUEUED"
    PREPARING = "PREPARING"
    TRAINING = "TRAINING"
    PAUSING = "PAUSING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL: frozenset[Phase] = frozenset({Phase.COMPLETED, Phase.FAILED, Phase.CANCELLED})


class RuleName(StrEnum):
    """The named rules; each event carries the one that moved the run."""

    ADMIT = "admit"
    START_TRAINING = "start-training"
    REQUEST_PAUSE = "request-pause"
    PAUSE_WHILE_QUEUED = "pause-while-queued"
    PAUSED = "paused"
    RESUME = "resume"
    REQUEUE = "requeue"
    COMPLETE = "complete"
    FAIL = "fail"
    CANCEL = "cancel"


_ACTIVE = {Phase.PREPARING, Phase.TRAINING}
_OPEN = {Phase.QUEUED, Phase.PREPARING, Phase.TRAINING, Phase.PAUSING, Phase.PAUSED}

RULES: Rules[Phase, RuleName] = Rules(
    "run",
    Phase,
    (
        rule(RuleName.ADMIT, {Phase.QUEUED}, Phase.PREPARING),
        rule(RuleName.START_TRAINING, {Phase.PREPARING}, Phase.TRAINING),
        rule(RuleName.REQUEST_PAUSE, _ACTIVE | {Phase.QUEUED}, Phase.PAUSING),
        rule(RuleName.PAUSE_WHILE_QUEUED, {Phase.QUEUED}, Phase.PAUSED),
        rule(RuleName.PAUSED, {Phase.PAUSING}, Phase.PAUSED),
        rule(RuleName.RESUME, {Phase.PAUSED}, Phase.QUEUED),
        # A job lost with its devices (its process died, the service restarted into a missing
        # job) goes back to the queue to run again from its last snapshot.
        rule(RuleName.REQUEUE, _ACTIVE | {Phase.PAUSING}, Phase.QUEUED),
        rule(RuleName.COMPLETE, _ACTIVE | {Phase.PAUSING}, Phase.COMPLETED),
        rule(RuleName.FAIL, _OPEN, Phase.FAILED),
        rule(RuleName.CANCEL, _OPEN, Phase.CANCELLED),
    ),
)


def transition(current: str, rule_name: RuleName, subject: str | None = None) -> Phase:
    """The phase a run in `current` moves to under `rule_name`, or `IllegalTransition` naming
    `subject` ("Run r-1") and its phase."""
    return RULES.target(current, RuleName(rule_name), subject)


def can(current: str, rule_name: RuleName) -> bool:
    return RULES.can(current, rule_name)


# A request takes the place of a weaker one only: a cancel replaces a pause, a pause never
# replaces a cancel, and neither pause replaces the other (the first one asked is the one done).
_STRENGTH: dict[Request, int] = {
    Request.PAUSE_SAVE: 1,
    Request.PAUSE_LATEST: 1,
    Request.CANCEL: 2,
}


def may_request(pending: str | None, wanted: Request) -> bool:
    """Whether `wanted` may become the run's request while `pending` is (None: nothing is)."""
    return pending is None or _STRENGTH[Request(pending)] < _STRENGTH[wanted]
