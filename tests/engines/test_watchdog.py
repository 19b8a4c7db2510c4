"""The stall watchdog writes a dump when steps stop completing, and only once per stall."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from akka_training.blobstore import LocalBlobStore
from akka_training.engines.watchdog import StallWatchdog


class Sink:
    stall_dump: str | None = None


def test_a_stall_is_dumped_uploaded_and_announced(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    sink = Sink()
    blocked = threading.Event()
    worker = threading.Thread(target=blocked.wait, name="stuck-step", daemon=True)
    worker.start()
    watchdog = StallWatchdog(
        0.3, tmp_path / "artifacts", store, lambda name: f"runs/r/attempts/2/{name}", sink
    )
    watchdog.start()
    watchdog.arm()
    try:
        deadline = time.monotonic() + 10
        while sink.stall_dump is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # still stalled: no second dump
    finally:
        watchdog.stop()
        blocked.set()

    assert sink.stall_dump is not None
    assert sink.stall_dump.startswith("runs/r/attempts/2/stall-")
    assert len(watchdog.dumps) == 1
    text = watchdog.dumps[0].read_text()
    assert watchdog.dumps[0].parent == tmp_path / "artifacts"
    stuck = text.split("--- thread stuck-step")[1].split("--- ")[0]
    assert "in wait" in stuck
    assert "host resident (VmRSS)" in text
    assert store.get_bytes(sink.stall_dump).decode() == text


def test_progress_rearms_the_watchdog(tmp_path: Path) -> None:
    now = [0.0]
    watchdog = StallWatchdog(
        10, tmp_path, LocalBlobStore(tmp_path / "b"), lambda n: n, Sink(), clock=lambda: now[0]
    )
    watchdog.progress()
    now[0] = 9.0
    assert watchdog.check() is None
    now[0] = 10.5
    assert watchdog.check() is not None
    now[0] = 30.0
    assert watchdog.check() is None  # the same stall
    watchdog.progress()
    now[0] = 41.0
    assert watchdog.check() is not None


def test_the_stall_clock_starts_with_training_not_with_the_job(tmp_path: Path) -> None:
    # Loading a large model takes longer than the stall limit: that is no stall, and the one
    # dump of the first real stall is still there to take.
    now = [0.0]
    watchdog = StallWatchdog(
        10, tmp_path, LocalBlobStore(tmp_path / "b"), lambda n: n, Sink(), clock=lambda: now[0]
    )
    watchdog.start()
    try:
        now[0] = 500.0  # still loading the model
        assert watchdog.check() is None
        watchdog.arm()  # the first step begins
        now[0] = 505.0
        assert watchdog.check() is None
        now[0] = 511.0
        first = watchdog.check()
        assert first is not None
        watchdog.progress()
        now[0] = 530.0  # a second, distinct stall gets its own dump
        second = watchdog.check()
        assert second is not None and second != first
        assert len(watchdog.dumps) == 2
    finally:
        watchdog.stop()
