"""The clock tests hold: its time moves when told, the waits it made count its seconds, and
`settle` says when the threads it woke are done."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import pytest

from akka_training.core.clock import SYSTEM_CLOCK, ManualClock


def test_time_moves_only_when_advanced_or_slept() -> None:
    clock = ManualClock(start=100.0)
    assert clock.monotonic() == 100.0
    clock.advance(2.5)
    clock.sleep(1.5)  # the sleeper makes the time pass
    asyncio.run(clock.asleep(1.0))
    assert clock.monotonic() == 105.0
    with pytest.raises(ValueError, match="a clock does not go back"):
        clock.advance(-1)


def test_its_date_and_time_moves_with_it_from_where_it_began() -> None:
    began = datetime(2026, 1, 1, tzinfo=UTC)
    clock = ManualClock(start=100.0, wall=began)
    assert clock.now() == began
    clock.advance(90.0)
    assert clock.now() == began + timedelta(seconds=90)


def test_without_a_start_its_date_and_time_is_the_machine_s_when_it_was_made() -> None:
    before = datetime.now(UTC)
    clock = ManualClock()
    assert before <= clock.now() <= datetime.now(UTC)
    assert SYSTEM_CLOCK.now().tzinfo is UTC


def test_a_timed_wait_ends_when_the_clock_passes_its_deadline() -> None:
    clock = ManualClock()
    event = clock.event()
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(event.wait(10.0)), daemon=True)
    waiter.start()
    clock.settle()  # it waits
    clock.advance(9.0)
    clock.settle()
    assert waiter.is_alive() and results == []
    clock.advance(1.0)
    waiter.join(timeout=60)
    assert results == [False]  # timed out, on the clock's time


def test_a_set_event_ends_the_wait_before_its_deadline() -> None:
    clock = ManualClock()
    event = clock.event()
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(event.wait(10.0)), daemon=True)
    waiter.start()
    clock.settle()
    event.set()
    waiter.join(timeout=60)
    assert results == [True]
    assert clock.monotonic() == 0.0
    assert event.wait(0) and event.is_set()
    event.clear()
    assert not event.wait(0)


def test_settle_waits_for_the_work_a_wake_set_off() -> None:
    # A thread that does something each time its deadline passes, as a watchdog does.
    clock = ManualClock()
    stop = clock.event()
    rounds: list[float] = []

    def loop() -> None:
        while not stop.wait(5.0):
            rounds.append(clock.monotonic())

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    clock.settle()
    for _ in range(3):
        clock.advance(5.0)
        clock.settle()  # the round is done before the test looks
    assert rounds == [5.0, 10.0, 15.0]
    stop.set()
    thread.join(timeout=60)
    clock.settle()  # an ended thread is not waited for


def test_a_condition_s_wait_for_counts_the_clock_s_seconds() -> None:
    clock = ManualClock()
    condition = clock.condition()
    ready = [False]
    results: list[bool] = []

    def wait() -> None:
        with condition:
            results.append(condition.wait_for(lambda: ready[0], timeout=3.0))

    first = threading.Thread(target=wait, daemon=True)
    first.start()
    clock.settle()
    with condition:
        ready[0] = True
        condition.notify()
    first.join(timeout=60)
    ready[0] = False
    second = threading.Thread(target=wait, daemon=True)
    second.start()
    clock.settle()
    clock.advance(3.0)
    second.join(timeout=60)
    assert results == [True, False]


def test_settle_names_the_threads_still_busy() -> None:
    clock = ManualClock()
    release = threading.Event()

    def busy() -> None:
        clock.event().wait(0.5)  # it waited on the clock once...
        release.wait()  # ...and now waits on something else

    thread = threading.Thread(target=busy, name="stuck-elsewhere", daemon=True)
    thread.start()
    clock.settle()
    clock.advance(1.0)
    try:
        with pytest.raises(TimeoutError, match="stuck-elsewhere"):
            clock.settle(timeout=0.2)
    finally:
        release.set()
        thread.join(timeout=60)


def test_the_system_clock_makes_the_standard_objects() -> None:
    event = SYSTEM_CLOCK.event()
    assert isinstance(event, threading.Event)
    assert isinstance(SYSTEM_CLOCK.condition(), threading.Condition)
    before = SYSTEM_CLOCK.monotonic()
    SYSTEM_CLOCK.sleep(0)
    asyncio.run(SYSTEM_CLOCK.asleep(0))
    assert SYSTEM_CLOCK.monotonic() >= before


def test_settle_can_wait_for_threads_to_begin_waiting() -> None:
    clock = ManualClock()
    go = threading.Event()
    stop = clock.event()

    def late() -> None:
        go.wait()
        stop.wait()

    thread = threading.Thread(target=late, daemon=True)
    thread.start()
    clock.settle()  # it has not waited on the clock yet: nothing to wait for
    go.set()
    clock.settle(threads=1)  # it waits on the clock now
    stop.set()
    thread.join(timeout=60)


def test_a_timeout_block_ends_once_the_clock_passes_it() -> None:
    clock = ManualClock()

    async def main() -> None:
        never = asyncio.Event()

        async def sleeper() -> None:
            await clock.asleep(2.0)  # another task's sleep moves the clock past the limit

        with pytest.raises(TimeoutError):
            async with clock.timeout(1.0):
                task = asyncio.ensure_future(sleeper())
                await never.wait()
        await task
        async with clock.timeout(1.0):  # a block the clock does not pass ends as it ends
            await asyncio.sleep(0)  # a yield to the loop, not a wait
        with pytest.raises(TimeoutError):
            async with clock.timeout(0):
                await never.wait()

    asyncio.run(main())
    assert clock.monotonic() == 2.0
