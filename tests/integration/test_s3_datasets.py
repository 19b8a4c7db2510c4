"""Dataset registration into an S3 blob store (a real endpoint on loopback): a 256 MiB upload
streams through in parts of a few MiB with the service's memory flat, and a refused or broken
upload leaves nothing in the bucket: no object, no open multipart upload."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from akka_training.core.errors import NotFound
from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests.s3_server import Bucket

pytestmark = pytest.mark.slow

MIB = 2**20


@pytest.fixture
def trainer(trainer_factory: Any, s3_bucket: Bucket) -> TrainerProcess:
    t: TrainerProcess = trainer_factory(
        {
            "trainer": {
                "catalog": [],
                "pools": [{"name": "default", "accelerator": "cpu", "devices": 1}],
                "storage": s3_bucket.storage_settings,
            }
        }
    )
    with t.client() as admin:
        admin.create_project("maths", quota=None)
    return t


def write_rows(path: Path, size: int) -> int:
    line = (
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "What is 2 + 2? " + "x" * 160},
                    {"role": "assistant", "content": "#### 4"},
                ]
            }
        )
        + "\n"
    ).encode()
    count = size // len(line)
    with open(path, "wb") as f:
        block = line * 4096
        for _ in range(count // 4096):
            f.write(block)
        f.write(line * (count % 4096))
    return count


def test_a_256_mib_registration_streams_into_the_bucket_with_flat_memory(
    trainer: TrainerProcess, s3_bucket: Bucket, tmp_path: Path
) -> None:
    path = tmp_path / "big.jsonl"
    count = write_rows(path, 256 * MIB - 4096)
    assert trainer.proc is not None
    service = psutil.Process(trainer.proc.pid)
    baseline = service.memory_info().rss
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], service.memory_info().rss)
            done.wait(0.05)  # a sample every 50 ms until the upload ends

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        registered = trainer.cli_json(
            "training", "datasets", "register", "maths/big", "-f", str(path), timeout=600
        )
    finally:
        done.set()
        sampler.join()
    assert registered["rows"] == count
    grown = (peak[0] - baseline) / MIB
    # 256 MiB went through holding a part or two (5 MiB each) and a batch at a time.
    assert grown < 96, f"the service grew by {grown:.0f} MiB during the upload"
    keys = s3_bucket.keys()
    assert keys == [f"datasets/sha256/{registered['sha256']}.jsonl"]
    head = s3_bucket.server.client().head_object(
        Bucket=s3_bucket.name, Key=f"trainer/{keys[0]}", PartNumber=1
    )
    assert head["ContentLength"] == 5 * MIB and head["PartsCount"] > 40
    assert s3_bucket.open_uploads() == []
    assert not (trainer.home / "blobs").exists()


def test_a_refused_upload_leaves_nothing_in_the_bucket(
    trainer: TrainerProcess, s3_bucket: Bucket, tmp_path: Path
) -> None:
    path = tmp_path / "bad.jsonl"
    write_rows(path, 12 * MIB)  # past two parts before the bad line
    with open(path, "ab") as f:
        f.write(b"{not json\n")
    result = trainer.cli(
        "training", "datasets", "register", "maths/bad", "-f", str(path), check=False
    )
    assert result.returncode == 1
    assert "The file was refused (1 problem):" in result.stderr
    assert s3_bucket.keys() == [] and s3_bucket.open_uploads() == []


def test_a_client_that_goes_away_midway_leaves_nothing_in_the_bucket(
    trainer: TrainerProcess, s3_bucket: Bucket, tmp_path: Path
) -> None:
    path = tmp_path / "cut.jsonl"
    write_rows(path, 24 * MIB)
    body = path.read_bytes()
    head = (
        "POST /v1/datasets/maths/cut HTTP/1.1\r\nHost: trainer\r\n"
        f"Authorization: Bearer {trainer.admin_token}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", trainer.port)) as sock:
        sock.sendall(head.encode() + body[: 16 * MIB])
        # The service has begun to store the upload: a multipart upload is open.
        until(s3_bucket.open_uploads, what="a multipart upload to start", timeout=60)
    until(lambda: not s3_bucket.open_uploads(), what="the multipart upload's abort", timeout=60)
    assert s3_bucket.keys() == []
    with trainer.client() as admin, pytest.raises(NotFound):
        admin.dataset_versions("maths/cut")
