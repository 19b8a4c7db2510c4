"""Named rules: how every stateful thing moves (a run's phase, a task's, a pipeline's, a claim's
and an attempt's state). A rule names the states it moves from and the one it moves to; a
`Rules` set of them answers where a thing in a state goes under a rule, or refuses with
`IllegalTransition`.

Each thing's rules live beside its states (`phases` for runs, `states` for the others); the
storage layer applies them to the row as stored (`storage.transitions`), so that a move decided
on a stale read is refused instead of written over a newer state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from akka_training.core.errors import Conflict

S = TypeVar("S", bound=StrEnum)
N = TypeVar("N", bound=StrEnum)


class IllegalTransition(Conflict):
    """A move that no rule allows from the state the thing is in: a bug, or a request that lost
    a race to another change (the API answers 409 with the sentence, never a 500)."""


class MovedMeanwhile(IllegalTransition):
    """The row changed between the read a move was decided on and the move's write: the move was
    not made, and the message names the state as stored."""


@dataclass(frozen=True)
class Rule(Generic[S, N]):
    name: N
    sources: frozenset[S]
    target: S


def rule(name: N, sources: Iterable[S], target: S) -> Rule[S, N]:
    return Rule(name, frozenset(sources), target)


class Rules(Generic[S, N]):
    """The rules of one kind of thing (`noun`: "run", "task", ...), by name."""

    def __init__(self, noun: str, states: type[S], rules: Iterable[Rule[S, N]]) -> None:
        self.noun = noun
        self.states = states
        self.by_name: dict[N, Rule[S, N]] = {r.name: r for r in rules}

    def __getitem__(self, name: N) -> Rule[S, N]:
        return self.by_name[name]

    def target(self, current: str, name: N, subject: str | None = None) -> S:
        """The state a thing in `current` moves to under rule `name`, or `IllegalTransition`
        naming `subject` ("Run r-1"; "A run" when not given) and its state."""
        found = self.by_name[name]
        state = self.states(current)
        if state not in found.sources:
            raise IllegalTransition(self.refusal(subject, state, name))
        return found.target

    def can(self, current: str, name: N) -> bool:
        return self.states(current) in self.by_name[name].sources

    def refusal(self, subject: str | None, state: str, name: N) -> str:
        allowed = ", ".join(sorted(self.by_name[name].sources))
        who = subject or f"A {self.noun}"
        return f"{who} is {state}; the rule {name.value!r} moves a {self.noun} from {allowed} only."
