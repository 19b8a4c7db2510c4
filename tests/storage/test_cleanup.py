"""Start-up cleanup of what a crash left in the blob store, on a local directory and on a real
S3 endpoint: partial writes, staged uploads and unrecorded snapshots go once older than the
grace period; recorded snapshots, finished blobs and anything younger stay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from akka_training.blobstore import BlobStore, BlobWriter, open_blob_store
from akka_training.core.storage import S3Options
from akka_training.deployment.cleanup import clean_crash_leftovers
from akka_training.storage.db import Database
from tests.controller.rows import add_run, add_snapshot
from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY, Bucket

HOUR = 3600.0


def leave_a_crash(blobs: BlobStore, db: Database) -> BlobWriter:
    """What a crashed service leaves; the writer it never finished is returned, for the test to
    let go of its file once cleanup is done (the crashed process's was closed by its end)."""
    with db.session() as session:
        add_run(session, "r1")
        session.flush()
        add_snapshot(session, "r1", 4)
    for name in ("step-4", "step-8"):  # step-8 was uploaded, never reported
        blobs.put_bytes(f"runs/r1/snapshots/{name}/weights/adapter_model.safetensors", b"w")
        blobs.put_bytes(f"runs/r1/snapshots/{name}/training-state/state.pt", b"s")
    blobs.put_bytes("runs/r1/adapter/adapter_model.safetensors", b"a")
    blobs.put_bytes("datasets/uploads/abandoned.jsonl", b"{}\n")
    blobs.put_bytes("datasets/sha256/kept.jsonl", b"{}\n")
    half = blobs.writer("datasets/uploads/interrupted.jsonl")
    half.write(b"x" * (6 * 2**20))  # a part of a multipart upload, on S3; a .part file locally
    # The crash: the writer is never committed nor aborted.
    return half


def check_cleanup(blobs: BlobStore, db: Database, young_partials: int = 0) -> None:
    half = leave_a_crash(blobs, db)
    before = blobs.list("")
    # Within the grace period nothing goes: a live job may still be reporting that snapshot.
    young = clean_crash_leftovers(blobs, db, HOUR)
    assert (young.partial_writes, young.staged_uploads, young.snapshots) == (young_partials, 0, 0)
    assert blobs.list("") == before
    later = datetime.now(UTC) + timedelta(seconds=2 * HOUR)
    done = clean_crash_leftovers(blobs, db, HOUR, now=later)
    assert (done.partial_writes, done.staged_uploads, done.snapshots) == (
        1 - young_partials,
        1,
        1,
    )
    assert blobs.list("") == [
        "datasets/sha256/kept.jsonl",
        "runs/r1/adapter/adapter_model.safetensors",
        "runs/r1/snapshots/step-4/training-state/state.pt",
        "runs/r1/snapshots/step-4/weights/adapter_model.safetensors",
    ]
    half.abort()  # its partial write is gone already: this only closes the file


def test_start_up_cleans_a_local_store(tmp_path: Path, database: Database) -> None:
    blobs = open_blob_store(f"file://{tmp_path / 'blobs'}")
    check_cleanup(blobs, database)
    assert list((tmp_path / "blobs" / ".tmp").iterdir()) == []


@pytest.mark.slow
def test_start_up_cleans_an_s3_store(
    s3_bucket: Bucket, migrated_sqlite: Path, tmp_path: Path
) -> None:
    path = tmp_path / "db.sqlite"
    path.write_bytes(migrated_sqlite.read_bytes())
    db = Database(f"sqlite:///{path}")
    blobs = open_blob_store(
        s3_bucket.url,
        S3Options(
            endpoint_url=s3_bucket.server.endpoint, region=REGION, path_style=True, part_size_mib=5
        ),
        {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
    )
    try:
        # moto's server dates every multipart upload 2010-11-10 (its ListMultipartUploads
        # template), so the open upload is already past the grace period at the first pass.
        check_cleanup(blobs, db, young_partials=1)
        assert s3_bucket.open_uploads() == []
    finally:
        db.dispose()


def test_cleanup_leaves_no_empty_folders_in_a_local_store(
    tmp_path: Path, database: Database
) -> None:
    blobs = open_blob_store(f"file://{tmp_path / 'blobs'}")
    half = leave_a_crash(blobs, database)
    later = datetime.now(UTC) + timedelta(seconds=2 * HOUR)
    clean_crash_leftovers(blobs, database, HOUR, now=later)
    half.abort()  # its partial write is gone already: this only closes the file
    root = tmp_path / "blobs"
    assert not (root / "runs" / "r1" / "snapshots" / "step-8").exists()
    assert not (root / "datasets" / "uploads").exists()
    empty = [p for p in root.rglob("*") if p.is_dir() and not any(p.iterdir()) and p.name != ".tmp"]
    assert empty == []


def test_a_deleted_snapshot_takes_its_empty_folders_with_it(tmp_path: Path) -> None:
    """As the sweeper deletes a swept snapshot's weights and training state."""
    blobs = open_blob_store(f"file://{tmp_path / 'blobs'}")
    blobs.put_bytes("runs/r1/snapshots/step-2/weights/adapter_model.safetensors", b"w")
    blobs.put_bytes("runs/r1/snapshots/step-2/training-state/state.pt", b"s")
    blobs.put_bytes("runs/r1/snapshots/step-4/weights/adapter_model.safetensors", b"w")
    blobs.delete("runs/r1/snapshots/step-2/weights/")
    blobs.delete("runs/r1/snapshots/step-2/training-state/")
    snapshots = tmp_path / "blobs" / "runs" / "r1" / "snapshots"
    assert sorted(p.name for p in snapshots.iterdir()) == ["step-4"]
