"""What a crash left in the blob store, removed at start-up once it is older than
``trainer.storage.cleanup-grace-seconds`` (so that nothing a live job or request still writes
is touched):

- partial writes: a local store's temporary files (``.tmp/.part-*``), an S3 store's multipart
  uploads never completed nor aborted;
- dataset uploads staged under ``datasets/uploads/`` and never moved under their hash;
- snapshot keys (``runs/<run>/snapshots/<name>/``) with no committed snapshot row: a job
  uploads a snapshot, then reports it, and the row is written only then;
- folders left empty (a local store's: deleted snapshots, swept ones).

It runs at start-up and again, now and then, with the controller's sweep (`controller.sweep`),
so that what a killed job or a killed upload left goes once its grace has passed, also while the
service keeps running.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from akka_training.blobstore import BlobStore
from akka_training.core.blobkeys import DATASET_UPLOADS, RUNS, snapshot_of, snapshot_prefix
from akka_training.storage.db import Database
from akka_training.storage.models import Snapshot

log = logging.getLogger(__name__)


@dataclass
class Cleaned:
    partial_writes: int = 0
    staged_uploads: int = 0
    snapshots: int = 0
    empty_folders: int = 0


def clean_crash_leftovers(
    blobs: BlobStore, db: Database, grace_seconds: float, now: datetime | None = None
) -> Cleaned:
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=grace_seconds)
    done = Cleaned()
    done.partial_writes = blobs.abort_partial_writes(cutoff)
    for key, when in blobs.listed_with_times(DATASET_UPLOADS):
        if when < cutoff:
            blobs.delete(key)
            done.staged_uploads += 1
    # The newest write under each snapshot prefix, by (run, snapshot name).
    newest: dict[tuple[str, str], datetime] = {}
    for key, when in blobs.listed_with_times(RUNS):
        snapshot = snapshot_of(key)
        if snapshot is not None:
            newest[snapshot] = max(when, newest.get(snapshot, when))
    if newest:
        with db.session() as session:
            recorded = {
                (str(run), str(name))
                for run, name in session.execute(select(Snapshot.run_id, Snapshot.name))
            }
        for (run_id, name), when in sorted(newest.items()):
            if (run_id, name) not in recorded and when < cutoff:
                blobs.delete(snapshot_prefix(run_id, name))
                done.snapshots += 1
    done.empty_folders = blobs.remove_empty_folders()
    if done.partial_writes or done.staged_uploads or done.snapshots:
        log.info(
            "cleanup: %d partial writes, %d staged uploads, %d unrecorded snapshots "
            "removed from %s",
            done.partial_writes,
            done.staged_uploads,
            done.snapshots,
            blobs.url,
        )
    return done
