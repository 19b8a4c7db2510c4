"""A blob store with no space left: the real service and CLI, the store on a size-limited
filesystem (a tmpfs of a few MiB, mounted for the test; it needs the right to mount, and the
tests are skipped, saying so, without it). An upload answers that storage is full and keeps
nothing; a snapshot that cannot be written fails its run saying that storage is full."""

from __future__ import annotations

import errno
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    scripted_settings,
    start_run,
    wait_for,
    wait_phase,
)

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "data"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB filesystem of its own."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"a size-limited tmpfs cannot be mounted here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    """Write until the filesystem is full; the file that filled it."""
    filler = directory / "filler"
    block = b"\0" * 2**20
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(block)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_an_upload_to_a_full_store_answers_that_storage_is_full(
    trainer_factory: Any, small_disk: Path, tmp_path: Path
) -> None:
    blobs = small_disk / "blobs"
    trainer = trainer_factory(scripted_settings(storage={"url": f"file://{blobs}"}))
    ensure_project(trainer, "maths")
    row = {
        "messages": [
            {"role": "user", "content": "What is 2 + 2? " + "x" * 900},
            {"role": "assistant", "content": "#### 4"},
        ]
    }
    big = tmp_path / "big.jsonl"
    big.write_text((json.dumps(row) + "\n") * 40_000)  # about 38 MB: more than the disk holds

    done = trainer.cli("training", "datasets", "register", "maths/big", "-f", str(big), check=False)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "The trainer's storage is full: no space left on the device" in done.stderr
    assert "Free space in the blob store (trainer.storage.url)" in done.stderr
    assert "Traceback" not in done.stderr and "OSError" not in done.stderr
    # Nothing half-written stays behind, and the store takes the next upload.
    assert list((blobs / ".tmp").iterdir()) == []
    assert not (blobs / "datasets" / "uploads").exists() or not any(
        (blobs / "datasets" / "uploads").iterdir()
    )
    register_dataset(trainer, "maths/small")


def test_a_snapshot_on_a_full_store_fails_the_run_saying_storage_is_full(
    trainer_factory: Any, small_disk: Path, dev_models: Path
) -> None:
    blobs = small_disk / "blobs"
    trainer = trainer_factory(
        {
            "trainer": {
                "dev-models-dir": str(dev_models),
                "controller": {"interval-seconds": 0.2},
                "storage": {"url": f"file://{blobs}"},
            }
        }
    )
    ensure_project(trainer, "demo")
    trainer.cli(
        "training",
        "datasets",
        "register",
        "demo/arithmetic",
        "-f",
        str(EXAMPLES / "arithmetic.jsonl"),
    )
    plan = {
        "kind": "run",
        "project": "demo",
        "baseModel": "tiny-chat",
        "config": {
            "dataset": "demo/arithmetic",
            "method": "sft",
            "maxSeqLength": 128,
            "hyperparams": {"training": {"maxSteps": 200, "batchSize": 4}},
        },
        "execution": {"saveEvery": 3},
    }
    run = start_run(trainer, plan)
    wait_for(trainer, run, lambda r: r.phase == "TRAINING" and r.progress.observed_step >= 1)
    filler = fill(small_disk)
    try:
        failed = wait_phase(trainer, run, "FAILED", "COMPLETED")
    finally:
        filler.unlink()
    assert failed.phase == "FAILED"
    assert failed.failure is not None
    assert failed.failure.code == "storage-full", failed.failure.reason
    assert failed.failure.first_line.startswith(
        "the storage this run writes to is full (no space left on the device)"
    )
    # What it says to do is what works: a failed run is not resumed, it is continued.
    assert failed.failure.first_line.endswith(
        "then start a new run from the last snapshot with `runs continue RUN --snapshot NAME "
        "--steps N` (a failed run cannot be resumed)"
    )
    assert "no space left on the device while saving " in failed.failure.reason
    assert f"to file://{blobs}" in failed.failure.reason
    # The snapshot that could not be written left nothing: no row, no files.
    with trainer.client() as client:
        recorded = {s.name for s in client.snapshots(run)}
    on_disk = {p.name for p in (blobs / "runs" / run / "snapshots").glob("step-*")}
    assert on_disk == recorded
    assert failed.attempt == 1  # a full disk is not retried: it would fail again
