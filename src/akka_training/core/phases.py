"""Run phases and the named rules that move a run between them.

Every phase change in the product goes through `transition()`. A rule names the phases it moves
from and the phase it moves to; asking for a move that no rule allows raises
`IllegalTransition`, so a bug shows up as an error instead of a run in an impossible state.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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


@dataclass(frozen=True)
class Rule:
    name: RuleName
    sources: frozenset[Phase]
    target: Phase


def _rule(name: RuleName, sources: set[Phase], target: Phase) -> Rule:
    return Rule(name, frozenset(sources), target)


_ACTIVE = {Phase.PREPARING, Phase.TRAINING}
_OPEN = {Phase.QUEUED, Phase.PREPARING, Phase.TRAINING, Phase.PAUSING, Phase.PAUSED}

RULES: dict[RuleName, Rule] = {
    r.name: r
    for r in (
        _rule(RuleName.ADMIT, {Phase.QUEUED}, Phase.PREPARING),
        _rule(RuleName.START_TRAINING, {Phase.PREPARING}, Phase.TRAINING),
        _rule(RuleName.REQUEST_PAUSE, _ACTIVE | {Phase.QUEUED}, Phase.PAUSING),
        _rule(RuleName.PAUSE_WHILE_QUEUED, {Phase.QUEUED}, Phase.PAUSED),
        _rule(RuleName.PAUSED, {Phase.PAUSING}, Phase.PAUSED),
        _rule(RuleName.RESUME, {Phase.PAUSED}, Phase.QUEUED),
        # A job lost with its devices (its process died, the service restarted into a missing
        # job) goes back to the queue to run again from its last snapshot.
        _rule(RuleName.REQUEUE, _ACTIVE | {Phase.PAUSING}, Phase.QUEUED),
        _rule(RuleName.COMPLETE, _ACTIVE | {Phase.PAUSING}, Phase.COMPLETED),
        _rule(RuleName.FAIL, _OPEN, Phase.FAILED),
        _rule(RuleName.CANCEL, _OPEN, Phase.CANCELLED),
    )
}


class IllegalTransition(Exception):
    pass


def transition(current: str | Phase, rule_name: RuleName) -> Phase:
    """The phase a run in `current` moves to under `rule_name`, or `IllegalTransition`."""
    rule = RULES[rule_name]
    phase = Phase(current)
    if phase not in rule.sources:
        allowed = ", ".join(sorted(rule.sources))
        raise IllegalTransition(
            f"rule {rule.name.value!r} moves a run from {allowed}, not from {phase.value}"
        )
    return rule.target


def can(current: str | Phase, rule_name: RuleName) -> bool:
    return Phase(current) in RULES[rule_name].sources
