"""The job's file sinks written from a background thread: the figures of short steps gather
before one write, and a flush or close writes what waits at once."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from akka_training.core.clock import ManualClock
from akka_training.telemetry.sinks import BackgroundSinks
from akka_training.testing.waiting import until


class Recording:
    def __init__(self) -> None:
        self.steps: list[int] = []
        self.flushed = 0
        self.closed = False

    def log_dict(self, kind: str, step: int, figures: Mapping[str, float]) -> None:
        self.steps.append(step)

    def flush(self) -> None:
        self.flushed += 1

    def close(self) -> None:
        self.closed = True


def test_figures_gather_until_the_gather_time_or_a_flush_and_close_writes_the_rest() -> None:
    sink = Recording()
    clock = ManualClock()
    background = BackgroundSinks([sink], gather_seconds=30, clock=clock)
    try:
        for step in (1, 2, 3):
            background.log_dict("sft", step, {"loss": 1.0 / step})
        clock.settle(threads=1)  # the thread took the first figures and waits for the rest
        assert sink.steps == []  # gathering: the thread wakes once for all of them

        flushing = threading.Thread(target=background.flush)
        flushing.start()
        flushing.join(timeout=5)
        assert not flushing.is_alive(), "a flush waited for the gather time"
        assert sink.steps == [1, 2, 3]
        assert sink.flushed == 1

        background.log_dict("sft", 4, {"loss": 0.25})
    finally:
        closing = threading.Thread(target=background.close)
        closing.start()
        closing.join(timeout=5)
    assert not closing.is_alive(), "closing waited for the gather time"
    assert sink.steps == [1, 2, 3, 4]
    assert sink.closed


def test_figures_reach_the_sinks_within_the_gather_time_without_a_flush() -> None:
    sink = Recording()
    clock = ManualClock()
    background = BackgroundSinks([sink], gather_seconds=0.5, clock=clock)
    try:
        background.log_dict("grpo", 7, {"reward/mean": 0.5})
        clock.settle(threads=1)
        clock.advance(0.4)
        clock.settle()
        assert sink.steps == []
        clock.advance(0.1)  # the gather time is up: the thread writes
        assert until(lambda: sink.steps, what="the figures to reach the sink", timeout=30) == [7]
    finally:
        background.close()
