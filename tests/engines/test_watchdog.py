"""The stall watchdog writes a dump when steps stop completing, and only once per stall. The
tests hold its clock."""

from __future__ import annotations

import threading
from pathlib import Path

from akka_training.blobstore import LocalBlobStore
from akka_training.core.clock import ManualClock
from akka_training.engines.watchdog import StallWatchdog


class Sink:
    stall_dump: str | None = None


def test_a_stall_is_dumped_uploaded_and_announced(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    sink = Sink()
    announced: list[bool] = []
    blocked = threading.Event()
    worker = threading.Thread(target=blocked.wait, name="stuck-step", daemon=True)
    worker.start()
    clock = ManualClock()
    watchdog = StallWatchdog(
        30.0,
        tmp_path / "artifacts",
        store,
        lambda name: f"runs/r/attempts/2/{name}",
        sink,
        on_stall=announced.append,
        clock=clock,
    )
    watchdog.start()
    watchdog.arm()
    try:
        clock.settle(threads=1)
        clock.advance(29.0)
        clock.settle()
        assert sink.stall_dump is None  # not stalled yet
        clock.advance(5.0)
        clock.settle()  # the watching thread's next look (every 5 s) finds it stalled
        assert sink.stall_dump is not None
        for _ in range(4):
            clock.advance(7.5)  # still stalled: no second dump
            clock.settle()
    finally:
        watchdog.stop()
        blocked.set()

    assert sink.stall_dump.startswith("runs/r/attempts/2/stall-")
    assert len(watchdog.dumps) == 1
    assert announced == [True]
    text = watchdog.dumps[0].read_text()
    assert text.startswith("No optimizer step completed for 34.0 s.")
    assert watchdog.dumps[0].parent == tmp_path / "artifacts"
    stuck = text.split("--- thread stuck-step")[1].split("--- ")[0]
    assert "in wait" in stuck
    assert "host resident (VmRSS)" in text
    assert store.get_bytes(sink.stall_dump).decode() == text


def test_progress_rearms_the_watchdog(tmp_path: Path) -> None:
    clock = ManualClock()
    announced: list[bool] = []
    watchdog = StallWatchdog(
        10,
        tmp_path,
        LocalBlobStore(tmp_path / "b"),
        lambda n: n,
        Sink(),
        on_stall=announced.append,
        clock=clock,
    )
    watchdog.progress()
    clock.advance(9.0)
    assert watchdog.check() is None
    clock.advance(1.5)
    assert watchdog.check() is not None
    clock.advance(19.5)
    assert watchdog.check() is None  # the same stall
    watchdog.progress()
    clock.advance(11.0)
    assert watchdog.check() is not None
    assert announced == [True, False, True]


def test_the_stall_clock_starts_with_training_not_with_the_job(tmp_path: Path) -> None:
    # Loading a large model takes longer than the stall limit: that is no stall, and the one
    # dump of the first real stall is still there to take.
    clock = ManualClock()
    watchdog = StallWatchdog(
        10, tmp_path, LocalBlobStore(tmp_path / "b"), lambda n: n, Sink(), clock=clock
    )
    watchdog.start()
    try:
        clock.settle(threads=1)
        clock.advance(500.0)  # still loading the model
        clock.settle()
        assert watchdog.dumps == []
        watchdog.arm()  # the first step begins
        clock.advance(5.0)
        clock.settle()
        assert watchdog.dumps == []
        clock.advance(6.0)
        clock.settle()
        assert len(watchdog.dumps) == 1
        watchdog.progress()
        clock.advance(19.0)  # a second, distinct stall gets its own dump
        clock.settle()
        assert len(watchdog.dumps) == 2 and watchdog.dumps[1] != watchdog.dumps[0]
    finally:
        watchdog.stop()
