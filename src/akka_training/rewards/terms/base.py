"""The seam every reward term implements.

A grader is the runtime of one configured term. It comes in two shapes, and the scorer runs
each accordingly:

- `SyncGrader`: plain (possibly CPU-bound) Python, run in the scorer's thread pool with a time
  limit, so one slow rule cannot stall the event loop that drives the remote terms.
- `AsyncGrader`: a remote call awaited on the scorer's event loop with the batch's shared
  `httpx.AsyncClient`; it enforces its own `timeout_seconds`.

Either returns a `TermOutcome` or raises `TermFailed`; any other exception is counted as cause
``error`` by the scorer. A grader must be safe to call from several threads (sync) or tasks
(async) at once, and `close()` releases whatever it started (worker processes, ...).
"""

from __future__ import annotations

import abc

import httpx

from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.rewards.inputs import RolloutInput, TermOutcome


class Grader(abc.ABC):
    """One configured reward term: its `name`, `weight` and `kind` as the plan states them."""

    kind: str

    def __init__(self, name: str, weight: float) -> None:
        self.name = name
        self.weight = float(weight)

    def close(self) -> None:
        """Release what the grader started. Called once by the scorer's `close()`."""
        return None  # most graders start nothing


class SyncGrader(Grader):
    # True for terms whose cost per rollout is far below a thread hand-off (a regex, a length,
    # a string match): the scorer then evaluates the whole batch in one worker call, under one
    # time limit, instead of one call per rollout.
    batched: bool = False

    @abc.abstractmethod
    def evaluate(self, rollout: RolloutInput) -> TermOutcome:
        """Score one rollout; runs in a worker thread."""


class AsyncGrader(Grader):
    # The longest one call may take; the grader itself enforces it.
    timeout_seconds: float

    def __init__(self, name: str, weight: float, *, clock: Clock = SYSTEM_CLOCK) -> None:
        """`clock`: the time its budget and its waits between tries count."""
        super().__init__(name, weight)
        self.clock = clock

    @abc.abstractmethod
    async def evaluate(self, rollout: RolloutInput, client: httpx.AsyncClient) -> TermOutcome:
        """Score one rollout on the scorer's event loop."""
