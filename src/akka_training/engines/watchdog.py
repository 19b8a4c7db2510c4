"""The stall watchdog: when no optimizer step completes for ``spec.telemetry.stallSeconds``, it
writes every thread's stack and a memory summary to ``artifacts/stall-<utc>.txt``, uploads it
beside the attempt (``runs/{run}/attempts/{n}/stall-<utc>.txt``) and sets the reporter's
`stall_dump` to its key, which the next heartbeat carries to the service.

The stall clock starts when training starts (`arm`, at the first step's beginning), not
when the job starts: loading the model and tokenising the data are no stall. One dump per
stall: a step completing ends the stall, and the next stall gets its own dump.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from akka_training.blobstore import BlobStore
from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.engines.memory import host_peak, host_resident

log = logging.getLogger(__name__)


class StallSink(Protocol):
    """Where the key of a dump goes (the job's `HttpReporter`)."""

    stall_dump: str | None


class StallWatchdog:
    def __init__(
        self,
        stall_seconds: float,
        artifacts: Path,
        store: BlobStore,
        key_for: Callable[[str], str],
        sink: StallSink,
        *,
        on_stall: Callable[[bool], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`on_stall(True)` is called when a stall is dumped, `on_stall(False)` when steps
        complete again (the telemetry's stalled gauge). `clock`: the time the stall limit and
        the watching thread's looks count."""
        self.stall_seconds = stall_seconds
        self._artifacts = artifacts
        self._store = store
        self._key_for = key_for
        self._sink = sink
        self._on_stall = on_stall
        self._clock = clock
        self._last_progress = clock.monotonic()
        self._armed = False
        self._dumped = False
        self._stop = clock.event()
        self._thread: threading.Thread | None = None
        self.dumps: list[Path] = []

    def start(self) -> None:
        """Start the watching thread; stalls count only once `arm` (or a step) started the
        clock."""
        self._thread = threading.Thread(target=self._watch, name="akka-watchdog", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        """Training starts: the stall clock starts now, with the first step."""
        self._armed = True
        self._last_progress = self._clock.monotonic()

    def progress(self) -> None:
        """An optimizer step completed."""
        self._armed = True
        self._last_progress = self._clock.monotonic()
        if self._dumped and self._on_stall is not None:
            self._on_stall(False)
        self._dumped = False

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def check(self) -> Path | None:
        """Dump when the job has stalled and no dump was written for this stall yet."""
        if not self._armed or self._dumped:
            return None
        if self._clock.monotonic() - self._last_progress < self.stall_seconds:
            return None
        self._dumped = True
        return self.dump()

    def dump(self) -> Path:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        name = f"stall-{stamp}.txt"
        path = self._artifacts / name
        path.parent.mkdir(parents=True, exist_ok=True)
        stalled = self._clock.monotonic() - self._last_progress
        path.write_text(stall_report(stalled))
        key = self._key_for(name)
        try:
            self._store.put_file(key, path)
        except OSError:
            log.exception("the stall dump %s could not be uploaded", path)
        else:
            self._sink.stall_dump = key
        self.dumps.append(path)
        if self._on_stall is not None:
            self._on_stall(True)
        log.warning("no optimizer step for %.0f s; stacks written to %s", stalled, path)
        return path

    def _watch(self) -> None:
        interval = max(0.05, min(5.0, self.stall_seconds / 4))
        while not self._stop.wait(interval):
            try:
                self.check()
            except Exception:
                log.exception("the stall watchdog failed")


def stall_report(stalled_seconds: float) -> str:
    """Every thread's stack and a memory summary, as text."""
    lines = [f"No optimizer step completed for {stalled_seconds:.1f} s.", ""]
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        lines.append(f"--- thread {names.get(ident, '?')} ({ident}) ---")
        lines.extend(line.rstrip("\n") for line in traceback.format_stack(frame))
        lines.append("")
    lines.append("--- memory ---")
    lines.append(memory_summary())
    return "\n".join(lines) + "\n"


def memory_summary() -> str:
    # A process that never loaded torch has no CUDA memory to summarise: torch is not imported
    # for it.
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch.cuda.memory_summary()
    resident, peak = host_resident(), host_peak()
    return (
        f"host resident (VmRSS): {_mib(resident)}\n"
        f"host peak since the step began (VmHWM): {_mib(peak)}"
    )


def _mib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / 2**20:.1f} MiB"
