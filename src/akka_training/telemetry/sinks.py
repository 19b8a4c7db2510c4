"""Files a training job writes its step figures to, beside its other artifacts.

A sink is a small seam: ``log_dict(kind, step, figures)`` and ``close()``. `JsonlSink` writes one
JSON line per step to ``metrics.jsonl``; `TensorBoardSink` writes scalars under
``tensorboard/`` with tensorboard's own event writer (it needs only numpy, so a job does not
import torch for it). Both are written whether or not a collector is configured.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from akka_training.core.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


class Sink(Protocol):
    """Receives every step's figures; must be safe to call from one thread at a time."""

    def log_dict(self, kind: str, step: int, figures: Mapping[str, float]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """``metrics.jsonl``: one line per step, ``{"step", "kind", "time", "figures"}``.

    A figure that is not a finite number (a NaN loss) is written as null, so every line is
    strict JSON.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / METRICS_FILE
        self._file = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def log_dict(self, kind: str, step: int, figures: Mapping[str, float]) -> None:
        line = {
            "step": step,
            "kind": kind,
            "time": round(time.time(), 3),
            "figures": {name: _finite(value) for name, value in figures.items()},
        }
        with self._lock:
            self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
            # A line per step is small; flushing keeps the file readable by a live job's reader.
            self._file.flush()

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


class TensorBoardSink:
    """Scalars as ``<kind>/<figure>`` under ``tensorboard/``: one event per step holding all its
    figures, each as tensorboard's own ``Writer.add_scalar`` writes one (a float tensor with
    the scalars plugin's metadata). One event a step rather than one a figure: tensorboard's
    record writer opens the file, checksums in Python and writes for each event, which for a
    reinforcement step's forty figures cost the job a few percent of a core
    (bench/engine_overhead.py)."""

    def __init__(self, directory: Path) -> None:
        # Imported here: tensorboard is part of the training extra, not of the service.
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
        from tensorboard.plugins.scalar import metadata as scalars
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.path = directory / TENSORBOARD_DIR
        self.path.mkdir(parents=True, exist_ok=True)
        self._writer: Any = EventFileWriter(str(self.path))
        self._event = event_pb2.Event
        self._tensor = tensor_pb2.TensorProto
        self._float = types_pb2.DT_FLOAT
        self._metadata = scalars.create_summary_metadata(display_name=None, description=None)
        self._metadata.data_class = summary_pb2.DataClass.DATA_CLASS_SCALAR
        self._lock = threading.Lock()
        self._closed = False

    def log_dict(self, kind: str, step: int, figures: Mapping[str, float]) -> None:
        event = self._event(wall_time=time.time(), step=step)
        for name, value in figures.items():
            event.summary.value.add(
                tag=f"{kind}/{name}",
                tensor=self._tensor(dtype=self._float, float_val=[float(value)]),
                metadata=self._metadata,
            )
        with self._lock:
            if not self._closed:
                self._writer.add_event(event)

    def flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._writer.flush()

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._writer.close()
                self._closed = True


class BackgroundSinks:
    """Writes to other sinks from a thread of its own, so that a training step never waits for
    a file. `flush` and `close` wait until everything queued was written.

    The thread wakes on a step's figures, then lets the figures of the steps that follow within
    `gather_seconds` gather before it writes them all: one wake of this thread (and of
    TensorBoard's own writer thread) for many short steps, not one a step. Each wake takes a
    core from the training threads for a moment, and every matmul waits for the slower of its
    two threads (bench/engine_overhead.py). A step's figures reach the files at most
    `gather_seconds` (of `clock`) after it ends; `flush` and `close` write at once."""

    def __init__(
        self, sinks: list[Sink], gather_seconds: float = 0.5, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.sinks = sinks
        self.gather_seconds = gather_seconds
        self._queue: queue.Queue[tuple[str, int, dict[str, float]] | None] = queue.Queue()
        self._hurry = clock.event()
        self._thread = threading.Thread(target=self._write, name="akka-sinks", daemon=True)
        self._thread.start()

    def log_dict(self, kind: str, step: int, figures: Mapping[str, float]) -> None:
        self._queue.put((kind, step, dict(figures)))

    def flush(self) -> None:
        self._hurry.set()
        self._queue.join()
        for sink in self.sinks:
            sink.flush()

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._hurry.set()
            self._thread.join()
        for sink in self.sinks:
            sink.close()

    def _gather(self) -> list[tuple[str, int, dict[str, float]] | None]:
        """What is queued once the first figures have waited `gather_seconds` (or a flush or
        close cut that short)."""
        items = [self._queue.get()]
        if items[0] is not None:
            self._hurry.wait(self.gather_seconds)
        self._hurry.clear()
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                return items

    def _write(self) -> None:
        while True:
            items = self._gather()
            try:
                for item in items:
                    if item is None:
                        return
                    for sink in self.sinks:
                        try:
                            sink.log_dict(*item)
                        except Exception:  # a full disk must not stop training
                            log.exception("writing step figures to %s failed", type(sink).__name__)
            finally:
                for _ in items:
                    self._queue.task_done()


def open_sinks(directory: Path, *, tensorboard: bool = True) -> list[Sink]:
    """The job's file sinks, written from a background thread. TensorBoard is skipped, with a
    warning, when tensorboard is not installed (a service-only installation); metrics.jsonl is
    always written."""
    sinks: list[Sink] = [JsonlSink(directory)]
    if tensorboard:
        try:
            sinks.append(TensorBoardSink(directory))
        except ImportError as exc:
            log.warning("TensorBoard files are off: tensorboard is not installed (%s)", exc)
    return [BackgroundSinks(sinks)]


def _finite(value: float) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None
