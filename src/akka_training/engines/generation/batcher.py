"""Requests are batched continuously: `Batcher` queues what callers submit from their own
threads, and one worker thread serves the engine (`GenerationEngine.serve`): what waits when a
batch starts is prefilled together, and what arrives while it decodes joins it at its next step
(up to `max_rows` completions at once), each caller answered as soon as its own completions end,
with its streamed deltas. A request naming an adapter the engine does not hold is refused alone;
a caller whose delta callback fails (its client went away) hears nothing more, and the batch
goes on."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from akka_training.engines.generation.engine import (
    AdapterNotLoaded,
    GenerationEngine,
    OnDelta,
    Submission,
)
from akka_training.engines.generation.schema import BASE, GenerationRequest, GenerationResult


class Batcher:
    """One worker over `engine`; `submit` blocks its caller until its requests are answered.
    `start=False` leaves the worker unstarted until `start()` (tests queue requests first)."""

    def __init__(self, engine: GenerationEngine, max_rows: int = 64, start: bool = True) -> None:
        self.engine = engine
        self.max_rows = max_rows
        self.batches = 0  # how many prefills the engine ran (newcomers admitted together)
        self.joined = 0  # of those, how many joined a batch that was decoding
        self._queue: list[Submission] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="generation-batcher", daemon=True)
        if start:
            self.start()

    @property
    def pending(self) -> int:
        """Submissions waiting to be admitted."""
        with self._cond:
            return len(self._queue)

    def start(self) -> None:
        self._thread.start()

    def submit(
        self, requests: Sequence[GenerationRequest], on_delta: OnDelta | None = None
    ) -> list[GenerationResult]:
        """The results of `requests`, generated in a batch with whatever else runs; `on_delta`
        hears their new text (its `request` is the position in `requests`). Raises
        `AdapterNotLoaded` for an adapter the engine does not hold."""
        held = self.engine.adapters
        for request in requests:
            if request.adapter != BASE and request.adapter not in held:
                raise AdapterNotLoaded(request.adapter)
        submission = Submission(requests, on_delta)
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._queue.append(submission)
            self._cond.notify()
        submission.done.wait()
        if submission.error is not None:
            raise submission.error
        assert submission.results is not None
        return submission.results

    def close(self) -> None:
        """Answer what was submitted, then stop the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _work(self) -> None:
        self.engine.serve(self._poll)

    def _poll(self, running: int) -> list[Submission] | None:
        """What joins the `running` rows: the waiting submissions that fit in `max_rows` (the
        first whatever its size when nothing runs, waiting for one); None once closed."""
        with self._cond:
            if not running:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return None
            taken: list[Submission] = []
            rows = running
            while self._queue and (
                not (running or taken) or rows + self._queue[0].size <= self.max_rows
            ):
                rows += self._queue[0].size
                taken.append(self._queue.pop(0))
            if taken:
                self.batches += 1
                self.joined += bool(running)
            return taken
