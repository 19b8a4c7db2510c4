"""State changes, one module a thing, each through one function with the named rules of `core`
and checked against the row as stored (`rows`): runs (`runs.move`, `runs.request`, and their
events), claims (`claims.move_claim`), attempts (`attempts.move_attempt`), tasks
(`tasks.move_task`) and pipelines (`pipelines.move_pipeline`). Nothing else assigns a state,
tests included (their factories build rows in a state, at creation). Both the request path
(`server.services`) and the controller change states, so this lives below them both.
"""

from akka_training.storage.transitions.attempts import move_attempt, record_outcome
from akka_training.storage.transitions.claims import (
    TASK_CLAIM_KIND,
    current_claim,
    move_claim,
    open_claim,
    open_task_claim,
    release_claim,
    release_task_claim,
    task_claim,
)
from akka_training.storage.transitions.pipelines import lock_pipeline, move_pipeline
from akka_training.storage.transitions.runs import (
    check_request,
    event,
    held_until,
    lock_run,
    move,
    request,
)
from akka_training.storage.transitions.tasks import lock_task, move_task, request_cancel

__all__ = [
    "TASK_CLAIM_KIND",
    "check_request",
    "current_claim",
    "event",
    "held_until",
    "lock_pipeline",
    "lock_run",
    "lock_task",
    "move",
    "move_attempt",
    "move_claim",
    "move_pipeline",
    "move_task",
    "open_claim",
    "open_task_claim",
    "record_outcome",
    "release_claim",
    "release_task_claim",
    "request",
    "request_cancel",
    "task_claim",
]
