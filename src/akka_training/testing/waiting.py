"""Waiting in a test for something another process or thread makes happen: `until`.

A test that must let a real thing happen (a subprocess reaches a state, a server answers, a
thread writes a file) polls for what it can see, with a deadline that only bounds a test gone
wrong: the deadline is never the assertion, so a loaded machine makes the test slower, not red.
What the test can drive itself (a retry budget, a pace, a stall limit) takes a
`akka_training.core.clock.ManualClock` instead, and nothing waits at all::

    status = until(lambda: client.get_run(run_id).status == "running" and "running",
                   timeout=60, what="the run to start")
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal, TypeVar

T = TypeVar("T")

# The deadline of a wait that names none: long, since it only ends a test that went wrong.
DEFAULT_TIMEOUT = 60.0
# How long to wait between two looks, in real seconds.
DEFAULT_INTERVAL = 0.05


def until(
    predicate: Callable[[], T | Literal[False] | None],
    *,
    what: str,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    ignoring: tuple[type[Exception], ...] = (),
    detail: Callable[[], str] | None = None,
) -> T:
    """Call `predicate` until it returns something truthy, and return that.

    Between two calls it waits `interval` real seconds. After `timeout` real seconds without a
    truthy answer it raises AssertionError naming `what` it waited for and the last value the
    predicate returned. An exception of a type in `ignoring` counts as "not yet" (a server not
    listening yet refuses the connection) and is the last value seen; any other propagates.
    `detail`, read only when the wait runs out, adds what explains the failure (a process's
    log) to the message, on the lines below it.
    The deadline only ends a test gone wrong: nothing asserts on how long the wait took."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    last: object = None
    while True:
        try:
            value = predicate()
        except ignoring as error:
            last = error
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            message = f"gave up after {timeout:g} s waiting for {what}; last seen: {last!r}"
            raise AssertionError(f"{message}\n{detail()}" if detail else message)
        pause.wait(interval)
