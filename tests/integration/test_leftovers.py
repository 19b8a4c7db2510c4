"""What killed processes leave in the store goes, once its grace has passed, also while the
service keeps running: the real service, killed by pid in the middle of an upload, then
started again."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from akka_training.testing.waiting import until
from tests.integration.helpers import ensure_project, scripted_settings

pytestmark = pytest.mark.slow

GRACE = 4.0


def slow_body(chunks: int) -> Iterator[bytes]:
    row = {
        "messages": [
            {"role": "user", "content": "What is 2 + 2? " + "x" * 1000},
            {"role": "assistant", "content": "#### 4"},
        ]
    }
    block = (json.dumps(row) + "\n").encode() * 1000  # about 1 MB
    for _ in range(chunks):
        yield block
        time.sleep(0.05)  # a slow client: the upload stays in flight (not a test's wait)


def upload_in_background(trainer: Any) -> threading.Thread:
    def send() -> None:
        try:
            httpx.post(
                f"{trainer.url}/v1/datasets/maths/big",
                content=slow_body(400),
                headers={
                    "Authorization": f"Bearer {trainer.admin_token}",
                    "Content-Type": "application/x-ndjson",
                },
                timeout=60,
            )
        except httpx.HTTPError:
            pass  # the service is killed under it

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_what_a_killed_service_and_a_killed_job_left_goes_after_the_grace(
    trainer_factory: Any,
) -> None:
    trainer = trainer_factory(
        scripted_settings(storage={"cleanup-grace-seconds": GRACE, "cleanup-every-seconds": 1})
    )
    ensure_project(trainer, "maths")
    blobs = Path(trainer.home) / "blobs"
    upload_in_background(trainer)

    def big_part() -> list[Path]:
        return [p for p in (blobs / ".tmp").glob(".part-*") if p.stat().st_size > 20 * 2**20]

    until(big_part, what="the upload to reach 20 MB", timeout=60, interval=0.2)
    trainer.kill()  # SIGKILL, by pid, mid-upload
    (part,) = big_part()
    # What a job killed while it uploaded snapshot step-20 leaves: its files, and no row.
    orphan = blobs / "runs" / "r-killed" / "snapshots" / "step-20" / "weights"
    orphan.mkdir(parents=True)
    (orphan / "adapter_model.safetensors").write_bytes(b"\0" * 1024)

    # Dated a minute ahead, the part is younger than the grace at start-up however long the
    # restart takes on a loaded machine ...
    ahead = time.time() + 60
    os.utime(part, (ahead, ahead))
    trainer.start()
    # ... so it is kept (a live writer might still own it) ...
    assert part.exists()
    # ... and, dated now again, removed by the running service once the grace has passed,
    # folders and all.
    written = time.time()
    os.utime(part, (written, written))
    until(lambda: not part.exists(), what="the partial upload to go", timeout=GRACE + 20)
    until(lambda: not (blobs / "runs" / "r-killed").exists(), what="the orphan to go", timeout=10)
    assert not (blobs / "datasets" / "uploads").exists() or not any(
        (blobs / "datasets" / "uploads").iterdir()
    )
    assert "Traceback" not in trainer.log()
