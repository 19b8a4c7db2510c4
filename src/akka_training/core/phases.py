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
# Phases in which the run holds its devices.
HOLDS_DEVICES: frozenset[Phase] = frozenset({Phase.PREPARING, Phase.TRAINING, Phase.PAUSING})


def is_open(phase: str) -> bool:
    return Phase(phase) not in TERMINAL


@dataclass(frozen=True)
class Rule:
    name: str
    sources: frozenset[Phase]
    target: Phase


def _rule(name: str, sources: set[Phase], target: Phase) -> Rule:
    return Rule(name, frozenset(sources), target)


_ACTIVE = {Phase.PREPARING, Phase.TRAINING}
_OPEN = {Phase.QUEUED, Phase.PREPARING, Phase.TRAINING, Phase.PAUSING, Phase.PAUSED}

RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        _rule("admit", {Phase.QUEUED}, Phase.PREPARING),
        _rule("start-training", {Phase.PREPARING}, Phase.TRAINING),
        _rule("request-pause", _ACTIVE | {Phase.QUEUED}, Phase.PAUSING),
        _rule("pause-while-queued", {Phase.QUEUED}, Phase.PAUSED),
        _rule("paused", {Phase.PAUSING}, Phase.PAUSED),
        _rule("resume", {Phase.PAUSED}, Phase.QUEUED),
        # A job lost with its devices (its process died, the service restarted into a missing
        # job) goes back to the queue to run again from its last snapshot.
        _rule("requeue", _ACTIVE | {Phase.PAUSING}, Phase.QUEUED),
        _rule("complete", _ACTIVE | {Phase.PAUSING}, Phase.COMPLETED),
        _rule("fail", _OPEN, Phase.FAILED),
        _rule("cancel", _OPEN, Phase.CANCELLED),
    )
}


class IllegalTransition(Exception):
    pass


def transition(current: str | Phase, rule_name: str) -> Phase:
    """The phase a run in `current` moves to under `rule_name`, or `IllegalTransition`."""
    rule = RULES[rule_name]
    phase = Phase(current)
    if phase not in rule.sources:
        allowed = ", ".join(sorted(rule.sources))
        raise IllegalTransition(
            f"rule {rule.name!r} moves a run from {allowed}, not from {phase.value}"
        )
    return rule.target


def can(current: str | Phase, rule_name: str) -> bool:
    return Phase(current) in RULES[rule_name].sources
