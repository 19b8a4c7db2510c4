"""Time as a parameter: what waits, retries or paces reads the time and waits through a `Clock`.

`SYSTEM_CLOCK` is the real one. `ManualClock` is the one tests hold: its time moves only when the
test `advance`s it or when code `sleep`s on it, so a retry budget, a pace or a stall limit is
tested in the clock's seconds, whatever the machine's load, and no test sleeps.

A wait with a timeout goes through an event or a condition the clock made (`Clock.event`,
`Clock.condition`): their ``wait(timeout)`` counts the clock's seconds. A thread that waits on
one of those is woken by a `ManualClock` when the test advances past its deadline; the test
then calls `ManualClock.settle`, which returns once every thread that waits on the clock is
waiting again, so that what the advance set off has happened before the test looks::

    clock = ManualClock()
    watchdog = StallWatchdog(..., clock=clock)   # its thread waits on clock.event()
    clock.advance(11)                             # past the stall limit
    clock.settle()                                # the watchdog has looked, and waits again

Imports nothing of ours, so that every layer can take one (the engines, the rewards in verl's
workers, the controller's pace).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

T = TypeVar("T")

# How often `ManualClock.settle` looks again for threads that ended (an ended thread says
# nothing): real seconds.
_SETTLE_LOOK_SECONDS = 0.05


class Event(Protocol):
    """A flag threads wait for, as `threading.Event`, its timeouts in its clock's seconds."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Clock(Protocol):
    """The time code reads, and the waits it makes.

    `monotonic` is the time in seconds (only differences mean anything); `now` is the date and
    time (UTC) that a record is stamped with or a figure is counted up to; `sleep` and `asleep`
    (in a coroutine) wait a number of seconds; `timeout` bounds the awaits of a coroutine's
    block as `asyncio.timeout` does (TimeoutError); `event` and `condition` make the
    synchronisation objects whose timed waits count this clock's seconds."""

    def monotonic(self) -> float: ...

    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...

    async def asleep(self, seconds: float) -> None: ...

    def timeout(self, seconds: float | None) -> AbstractAsyncContextManager[object]: ...

    def event(self) -> Event: ...

    def condition(self) -> threading.Condition: ...


class SystemClock:
    """The machine's monotonic time and the standard library's waits."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def timeout(self, seconds: float | None) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)

    def event(self) -> Event:
        return threading.Event()

    def condition(self) -> threading.Condition:
        return threading.Condition()


SYSTEM_CLOCK: Clock = SystemClock()


class ManualClock:
    """A clock whose time moves only when told: `advance` moves it and wakes the waits (and
    ends the `timeout` blocks) it passes the deadline of; a `sleep` (or `asleep`) moves it by
    its own length at once (the sleeper is the one making time pass: the sleeps of tasks that
    sleep side by side add up). `settle` waits, in real time, until the threads that wait on
    this clock are all waiting again.

    Its date and time (`now`) begins at `wall` (the machine's when the clock is made, so that it
    reads as the time of the records the code under test stamps itself) and moves with it."""

    def __init__(self, start: float = 0.0, wall: datetime | None = None) -> None:
        self._start = start
        self._wall = wall if wall is not None else datetime.now(UTC)
        self._now = start
        self._lock = threading.Lock()
        # Notified whenever a thread begins a wait (what `settle` waits for).
        self._entered = threading.Condition(self._lock)
        # The wait each thread is in now, and every thread that ever waited on this clock.
        self._waits: dict[int, _Wait] = {}
        self._threads: dict[int, threading.Thread] = {}
        # The coroutines' timeouts (`timeout`) not yet expired.
        self._expiries: list[_Expiry] = []

    # --- the Clock protocol -------------------------------------------------------------------

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def now(self) -> datetime:
        with self._lock:
            return self._wall + timedelta(seconds=self._now - self._start)

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    async def asleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)  # a sleep lets the loop's other tasks run, as a real one does

    @contextlib.asynccontextmanager
    async def timeout(self, seconds: float | None) -> AsyncIterator[object]:
        """Bound the block by `seconds` of this clock: it ends with TimeoutError once the
        clock passes that (an `advance`, or a sleep of another task), however long it takes
        in real time."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(None) as scope:
            if seconds is None:
                yield scope
                return
            expiry = _Expiry(self.monotonic() + max(0.0, seconds), loop, scope)
            with self._lock:
                due = expiry.deadline <= self._now
                if not due:
                    self._expiries.append(expiry)
            if due:
                scope.reschedule(loop.time())
            try:
                yield scope
            finally:
                with self._lock:
                    if expiry in self._expiries:
                        self._expiries.remove(expiry)

    def event(self) -> Event:
        return _ManualEvent(self)

    def condition(self) -> threading.Condition:
        return _ManualCondition(self)

    # --- what a test does -----------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move the time on by `seconds` and wake every wait whose deadline that reaches."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds:g} s)")
        with self._lock:
            self._now += seconds
            due = [w for w in self._waits.values() if w.deadline <= self._now]
            for wait in due:
                wait.timed_out = True
                del self._waits[wait.thread]
            expired = [e for e in self._expiries if e.deadline <= self._now]
            for expiry in expired:
                self._expiries.remove(expiry)
        for wait in due:
            wait.condition.wake()
        for expiry in expired:
            expiry.loop.call_soon_threadsafe(_expire, expiry.scope)

    def settle(self, *, threads: int = 0, timeout: float = 60.0) -> None:
        """Return once every live thread that has waited on this clock (but the caller) is
        waiting on it again, and at least `threads` of them are (the threads a component
        just started, before their first wait): what the last `advance` or notification set
        off is done. Raises `TimeoutError` naming the busy threads after `timeout` real
        seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while (busy := self._busy()) or len(self._waits) < threads:
                left = deadline - time.monotonic()
                if left <= 0:
                    names = ", ".join(sorted(t.name for t in busy)) or "none"
                    raise TimeoutError(
                        f"{len(self._waits)} thread(s) waiting and these still busy after "
                        f"{timeout:g} s: {names}"
                    )
                self._entered.wait(min(left, _SETTLE_LOOK_SECONDS))

    # --- the waits of the events and conditions it made ---------------------------------------

    def _enter(self, condition: _ManualCondition, timeout: float | None) -> _Wait:
        thread = threading.current_thread()
        with self._lock:
            deadline = math.inf if timeout is None else self._now + max(0.0, timeout)
            wait = _Wait(thread.ident or 0, condition, deadline)
            if deadline <= self._now:
                wait.timed_out = True
                return wait
            self._threads[wait.thread] = thread
            self._waits[wait.thread] = wait
            self._entered.notify_all()
        return wait

    def _leave(self, wait: _Wait) -> None:
        with self._lock:
            if self._waits.get(wait.thread) is wait:
                del self._waits[wait.thread]

    def _notified(self, condition: _ManualCondition) -> None:
        """Every wait on `condition` was notified: those threads are no longer waiting."""
        with self._lock:
            for thread, wait in list(self._waits.items()):
                if wait.condition is condition:
                    del self._waits[thread]

    def _busy(self) -> list[threading.Thread]:
        me = threading.get_ident()
        return [
            thread
            for ident, thread in self._threads.items()
            if ident != me and ident not in self._waits and thread.is_alive()
        ]


@dataclass
class _Wait:
    thread: int
    condition: _ManualCondition
    deadline: float
    timed_out: bool = False


@dataclass(eq=False)
class _Expiry:
    deadline: float
    loop: asyncio.AbstractEventLoop
    scope: asyncio.Timeout


def _expire(scope: asyncio.Timeout) -> None:
    """End the block `scope` bounds now (on its loop), unless it has ended already."""
    with contextlib.suppress(RuntimeError):
        scope.reschedule(asyncio.get_running_loop().time())


class _ManualCondition(threading.Condition):
    """A condition whose timed waits count a `ManualClock`'s seconds. A notification wakes
    every waiter (``notify(1)`` too): the standard library allows any waiter to wake at any
    time, so code waits in a loop on what it waits for, and the clock knows who is awake."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self._clock = clock

    def wait(self, timeout: float | None = None) -> bool:
        wait = self._clock._enter(self, timeout)
        if wait.timed_out:
            return False
        try:
            super().wait()
        finally:
            self._clock._leave(wait)
        return not wait.timed_out

    def wait_for(self, predicate: Callable[[], T], timeout: float | None = None) -> T:
        end = None if timeout is None else self._clock.monotonic() + timeout
        result = predicate()
        while not result:
            if end is None:
                self.wait()
            else:
                left = end - self._clock.monotonic()
                if left <= 0:
                    break
                self.wait(left)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        # `notify_all` comes here too (with the number of waiters).
        super().notify(sys.maxsize)
        self._clock._notified(self)

    def wake(self) -> None:
        """Wake the waits whose deadline the clock passed (they find they timed out)."""
        with self:
            self.notify()


class _ManualEvent:
    """`threading.Event` over a `ManualClock`'s condition."""

    def __init__(self, clock: ManualClock) -> None:
        self._condition = clock.condition()
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._condition:
            self._flag = True
            self._condition.notify_all()

    def clear(self) -> None:
        with self._condition:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        with self._condition:
            return self._condition.wait_for(lambda: self._flag, timeout)
