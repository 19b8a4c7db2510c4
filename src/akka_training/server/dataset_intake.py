"""Receiving a dataset upload: the body is counted, hashed, stored and validated as it streams in.

The request body arrives as an async stream of chunks (`request.stream()`; multipart would buffer
the whole file first). The event loop only counts and batches them (a batch is a list of the
chunks as they came, never joined: that would copy the body once more); a worker thread validates
each batch's rows while a store thread hashes it and writes it to a staged blob, and the loop
receives the next batch.
Nothing is kept unless the stream ended whole and every row validated: a body over the limit, a
client that went away and a refused file all leave no blob behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from akka_training.blobstore import BlobStore, BlobWriter
from akka_training.core.blobkeys import DATASET_UPLOADS
from akka_training.core.errors import InvalidRequest, PayloadTooLarge, Problem
from akka_training.server.dataset_rows import RowSummary, RowValidator

# What the worker thread takes at once: large enough that per-batch costs vanish, small enough
# that the batches in flight keep the service's memory flat (bench/upload.py: 1 MiB batches
# upload faster than 256 KiB or 4 MiB ones, and 4 MiB ones cost the service about 12 MiB more).
BATCH_BYTES = 1024 * 1024
# Threads that hash and write batches beside the row checks. A store task waits on nothing, so
# a bounded pool cannot deadlock; uploads beyond its size queue for a moment.
_STORE_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="dataset-store")


class DatasetRefused(InvalidRequest):
    """The file's rows did not validate (HTTP 422, code ``invalid``)."""

    status = 422


@dataclass(frozen=True)
class Intake:
    """A whole, valid upload, staged in the blob store under `staged_key` until it is moved
    under its content key."""

    sha256: str
    bytes: int
    rows: int
    format: str
    has_images: bool
    staged_key: str


async def receive_dataset(
    chunks: AsyncIterator[bytes],
    blobs: BlobStore,
    max_bytes: int,
    declared_bytes: int | None = None,
) -> Intake:
    """Take a dataset body from `chunks`. Raises `PayloadTooLarge` as soon as the body passes
    `max_bytes` (or at once when `declared_bytes`, the Content-Length, does), `DatasetRefused`
    when rows are invalid, and whatever `chunks` raises when the client goes away; in every such
    case nothing is left in the blob store. The caller owns the staged blob of the result."""
    if declared_bytes is not None and declared_bytes > max_bytes:
        raise too_large(max_bytes)
    staged = f"{DATASET_UPLOADS}/{secrets.token_hex(8)}.jsonl"
    sink = _Sink(blobs.writer(staged))
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[None] | None = None
    batch: list[bytes] = []
    batched = 0
    total = 0
    try:
        async for chunk in chunks:
            total += len(chunk)
            if total > max_bytes:
                raise too_large(max_bytes)
            batch.append(chunk)
            batched += len(chunk)
            if batched >= BATCH_BYTES:
                # One batch in the worker while the loop receives the next one. The batch goes
                # as the chunks it arrived in: joining them would copy the body once more.
                if pending is not None:
                    await pending
                pending = loop.run_in_executor(None, sink.feed, batch)
                batch, batched = [], 0
        if pending is not None:
            await pending
            pending = None
        if batch:
            await loop.run_in_executor(None, sink.feed, batch)
        summary, digest = await loop.run_in_executor(None, sink.finish)
    except BaseException:
        # The worker may still hold a batch; the sink's lock makes abort wait for it.
        sink.abort()
        raise
    if not summary.ok:
        raise refused(summary)
    if summary.rows == 0:
        raise DatasetRefused(
            "The file holds no rows; a dataset is JSON Lines, one chat or prompt-completion row "
            "per line."
        )
    assert summary.format is not None
    return Intake(digest, total, summary.rows, summary.format, summary.has_images, staged)


def too_large(max_bytes: int) -> PayloadTooLarge:
    limit = size_text(max_bytes)
    return PayloadTooLarge(
        f"The upload is larger than this trainer's limit of {limit} "
        "(trainer.datasets.max-bytes); split the file or ask the operator to raise "
        "trainer.datasets.max-bytes."
    )


def refused(summary: RowSummary) -> DatasetRefused:
    count = summary.problem_count
    listed = summary.problems
    noun = "problem" if count == 1 else "problems"
    lines = [f"The file was refused ({count} {noun}):"]
    lines += [f"  - {p.message}" for p in listed]
    if count > len(listed):
        lines.append(f"  … and {count - len(listed)} more")
    problems = [
        Problem(f"line {p.line}" + (f" {p.field}" if p.field else ""), p.message) for p in listed
    ]
    return DatasetRefused("\n".join(lines), problems)


def size_text(n: int) -> str:
    """A limit as people write it: 256 MiB, 64 KiB, 1000 bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


class _Sink:
    """Hashes, stores and validates batches in order. Once a row is refused the file cannot be
    kept, so the staged blob is dropped at once and only the validation goes on (to count every
    problem). Methods run in worker threads one at a time; the lock orders them with `abort`."""

    def __init__(self, writer: BlobWriter) -> None:
        self._writer = writer
        self._hash = hashlib.sha256()
        self._rows = RowValidator()
        self._storing = True
        self._lock = threading.Lock()

    def feed(self, chunks: list[bytes]) -> None:
        with self._lock:
            # Hashing and writing let go of the GIL while they work, so they run beside the row
            # checks; but the store thread needs it back after each chunk and waits for the
            # checks to let go of it, so it mostly finishes after them (bench/upload.py).
            stored = _STORE_POOL.submit(self._store, chunks) if self._storing else None
            try:
                for chunk in chunks:
                    self._rows.feed(chunk)
            finally:
                if stored is not None:
                    stored.result()
            if self._storing and not self._rows.ok:
                self._drop()

    def _store(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self._hash.update(chunk)
            self._writer.write(chunk)

    def finish(self) -> tuple[RowSummary, str]:
        with self._lock:
            summary = self._rows.finish()
            if self._storing and summary.ok and summary.rows:
                try:
                    self._writer.commit()
                except BaseException:
                    self._writer.abort()
                    raise
                finally:
                    self._storing = False
            else:
                self._drop()
            return summary, self._hash.hexdigest()

    def abort(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._storing:
            self._storing = False
            self._writer.abort()
