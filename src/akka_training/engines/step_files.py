"""A step's rollouts kept as its step file: stored and reported (`keep_step_file`), at once
(`StepFiles`, verl's) or off the training step's critical path (`StepFileWriter`, TRL's).

`StepFileWriter` takes each step's rollouts from the training loop and keeps them on one
background thread: it stores the step file (one write to the blob store, atomic: a reader
never sees half a file) and reports it, in step order. The queue is bounded (`DEPTH` steps), so
a writer that falls behind slows the loop down rather than holding every step's rollouts in
memory.

`wait` returns once every step handed over is kept; the step pipeline calls it before a
snapshot is reported (a snapshot never refers to a rollout file not yet written) and the
engine when training ends (stopped, paused or finished: every rollout is kept). A step that
could not be kept fails the run: the failure is raised from the next `submit` or `wait`, with
the step it concerns.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from akka_training.blobstore import BlobStore
from akka_training.core import blobkeys
from akka_training.core.errors import storage_full
from akka_training.core.reports import RolloutsReport
from akka_training.core.storage import StoreUnreachable
from akka_training.engines.failures import JobError, out_of_memory
from akka_training.engines.reporter import HttpReporter
from akka_training.rewards.rollouts import Rollout, step_file_bytes, step_summary

DEPTH = 2
Item = TypeVar("Item")


def keep_step_file(
    store: BlobStore, reporter: HttpReporter, run_id: str, step: int, rollouts: Sequence[Rollout]
) -> None:
    """Store a step's rollouts as its step file (built in memory, stored with one write: no
    copy on the job's disk first) and report it."""
    key = blobkeys.rollouts_key(run_id, step)
    store.put_bytes(key, step_file_bytes(rollouts))
    summary = step_summary(rollouts)
    reporter.rollouts(
        RolloutsReport(
            step=step,
            blob=key,
            count=summary.count,
            best_score=summary.best,
            worst_score=summary.worst,
        )
    )


class StepFiles:
    """Each step's file stored and reported as it is handed over, on the caller's thread."""

    def __init__(self, store: BlobStore, reporter: HttpReporter, run_id: str) -> None:
        self._store = store
        self._reporter = reporter
        self._run_id = run_id

    def submit(self, step: int, rollouts: Sequence[Rollout]) -> None:
        keep_step_file(self._store, self._reporter, self._run_id, step, rollouts)

    def wait(self) -> None:
        return None  # each is kept before `submit` returns


class StepFileWriter(Generic[Item]):
    """One thread that calls `keep(step, item)` for each submitted step, in order."""

    def __init__(self, keep: Callable[[int, Item], None], depth: int = DEPTH) -> None:
        self._keep = keep
        self._queue: queue.Queue[tuple[int, Item] | None] = queue.Queue(maxsize=depth)
        self._failure: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="akka-step-files", daemon=True)
        self._thread.start()

    def submit(self, step: int, item: Item) -> None:
        """Hand a step over; waits only while `depth` steps are already waiting."""
        self._raise()
        if self._closed:
            raise RuntimeError("the step file writer is closed")
        self._queue.put((step, item))

    def wait(self) -> None:
        """Return once every submitted step is kept; raise if one could not be."""
        self._queue.join()
        self._raise()

    def close(self) -> None:
        """Keep what is pending, then stop the thread (a failure is left to `wait`)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()

    def _loop(self) -> None:
        while True:
            entry = self._queue.get()
            try:
                if entry is None:
                    return
                if self._failure is None:  # after a failure, the run is failing: keep no more
                    step, item = entry
                    try:
                        self._keep(step, item)
                    except BaseException as exc:
                        self._failure = _failure(step, exc)
            finally:
                self._queue.task_done()

    def _raise(self) -> None:
        if self._failure is not None:
            raise self._failure


def _failure(step: int, exc: BaseException) -> BaseException:
    """What the training loop raises for a step that could not be kept: errors whose reason is
    known (storage full, store unreachable, out of memory) as they are, others as a job error
    naming the step."""
    known = isinstance(exc, JobError | StoreUnreachable) or storage_full(exc) is not None
    if known or out_of_memory(exc):
        return exc
    error = JobError(f"the rollouts of step {step} could not be kept: {exc}")
    error.__cause__ = exc
    return error
