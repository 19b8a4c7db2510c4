"""Requests that arrive together are answered in one batch: `Batcher` queues what callers
submit from their own threads, and one worker thread hands everything waiting to the engine at
once (up to `max_rows` completions), then gives each caller its own results and streamed
deltas. A request naming an adapter the engine does not hold is refused alone; a caller whose
delta callback fails (its client went away) hears nothing more, and the batch goes on."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from akka_training.engines.generation.engine import AdapterNotLoaded, GenerationEngine, OnDelta
from akka_training.engines.generation.schema import BASE, Delta, GenerationRequest, GenerationResult


@dataclass
class _Item:
    requests: Sequence[GenerationRequest]
    on_delta: OnDelta | None
    done: threading.Event = field(default_factory=threading.Event)
    results: list[GenerationResult] | None = None
    error: BaseException | None = None
    deaf: bool = False  # its callback failed: it hears no more deltas

    @property
    def rows(self) -> int:
        return sum(r.sampling.n for r in self.requests)

    def hear(self, delta: Delta) -> None:
        if self.on_delta is None or self.deaf:
            return
        try:
            self.on_delta(delta)
        except Exception:
            self.deaf = True


class Batcher:
    """One worker over `engine`; `submit` blocks its caller until its requests are answered.
    `start=False` leaves the worker unstarted until `start()` (tests queue requests first)."""

    def __init__(self, engine: GenerationEngine, max_rows: int = 64, start: bool = True) -> None:
        self.engine = engine
        self.max_rows = max_rows
        self.batches = 0  # how many batches the engine ran
        self._queue: list[_Item] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="generation-batcher", daemon=True)
        if start:
            self.start()

    @property
    def pending(self) -> int:
        """Submissions waiting for the next batch."""
        with self._cond:
            return len(self._queue)

    def start(self) -> None:
        self._thread.start()

    def submit(
        self, requests: Sequence[GenerationRequest], on_delta: OnDelta | None = None
    ) -> list[GenerationResult]:
        """The results of `requests`, generated in a batch with whatever else is waiting;
        `on_delta` hears their new text (its `request` is the position in `requests`). Raises
        `AdapterNotLoaded` for an adapter the engine does not hold."""
        held = self.engine.adapters
        for request in requests:
            if request.adapter != BASE and request.adapter not in held:
                raise AdapterNotLoaded(request.adapter)
        item = _Item(requests, on_delta)
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._queue.append(item)
            self._cond.notify()
        item.done.wait()
        if item.error is not None:
            raise item.error
        assert item.results is not None
        return item.results

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed and not self._queue:
                    return
                batch = [self._queue.pop(0)]
                rows = batch[0].rows
                while self._queue and rows + self._queue[0].rows <= self.max_rows:
                    rows += self._queue[0].rows
                    batch.append(self._queue.pop(0))
            self._run(batch)

    def _run(self, batch: list[_Item]) -> None:
        flat: list[GenerationRequest] = []
        owners: list[tuple[_Item, int]] = []
        for item in batch:
            for position, request in enumerate(item.requests):
                flat.append(request)
                owners.append((item, position))

        def dispatch(delta: Delta) -> None:
            item, position = owners[delta.request]
            item.hear(Delta(position, delta.index, delta.text, delta.finish_reason))

        try:
            results = self.engine.generate(flat, dispatch)
        except BaseException as exc:  # every caller of the batch hears why
            for item in batch:
                item.error = exc
                item.done.set()
            return
        finally:
            self.batches += 1
        at = 0
        for item in batch:
            item.results = results[at : at + len(item.requests)]
            at += len(item.requests)
            item.done.set()
