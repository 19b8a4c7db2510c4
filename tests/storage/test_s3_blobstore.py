"""The S3 blob store against a real S3 endpoint on loopback (moto's server, tests/s3_server.py):
atomic writes, multipart uploads of a few MiB a part with flat memory, aborts that leave
nothing, listing and deleting prefixes, moves, and the refusals that name the store."""

from __future__ import annotations

import resource
import socket
from pathlib import Path

import pytest

from akka_training.blobstore import open_blob_store
from akka_training.blobstore.s3 import S3BlobStore
from akka_training.core.storage import S3Options, StoreUnreachable
from tests.s3_server import ACCESS_KEY, REGION, SECRET_KEY, Bucket

# Tens of MiB through a real endpoint: the slow layer.
pytestmark = pytest.mark.slow

MIB = 2**20


def store_of(bucket: Bucket, **options: object) -> S3BlobStore:
    s3 = S3Options(
        endpoint_url=bucket.server.endpoint,
        region=REGION,
        path_style=True,
        part_size_mib=5,
        **options,
    )
    store = open_blob_store(
        bucket.url, s3, {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}
    )
    assert isinstance(store, S3BlobStore)
    return store


def test_a_blob_is_invisible_until_its_commit_and_an_abort_leaves_nothing(
    s3_bucket: Bucket,
) -> None:
    store = store_of(s3_bucket)
    store.check()
    writer = store.writer("datasets/a.jsonl")
    writer.write(b"x" * (6 * MIB))  # past one part: a multipart upload is open
    assert s3_bucket.open_uploads() == ["trainer/datasets/a.jsonl"]
    assert not store.exists("datasets/a.jsonl")
    writer.abort()
    assert s3_bucket.open_uploads() == []
    assert s3_bucket.keys() == []
    with pytest.raises(RuntimeError), store.writer("datasets/a.jsonl") as w:
        w.write(b"y" * (11 * MIB))
        raise RuntimeError("the client went away")
    assert s3_bucket.open_uploads() == [] and s3_bucket.keys() == []
    store.put_bytes("datasets/small.jsonl", b"whole")
    assert store.get_bytes("datasets/small.jsonl") == b"whole"
    assert s3_bucket.keys() == ["datasets/small.jsonl"]


def test_a_large_blob_uploads_in_parts_and_streams_back(s3_bucket: Bucket) -> None:
    store = store_of(s3_bucket)
    block = bytes(range(256)) * 4096  # 1 MiB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with store.writer("datasets/big.bin") as w:
        for _ in range(64):
            w.write(block)
        w.commit()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    # 64 MiB went out holding about one 5 MiB part at a time.
    assert grown_mib < 40, f"the upload grew the process by {grown_mib:.0f} MiB"
    head = s3_bucket.server.client().head_object(
        Bucket=s3_bucket.name, Key="trainer/datasets/big.bin", PartNumber=1
    )
    assert head["PartsCount"] == 13 and head["ContentLength"] == 5 * MIB
    assert store.size("datasets/big.bin") == 64 * MIB
    with store.open("datasets/big.bin") as f:
        first = f.read(MIB)
        rest = 0
        while chunk := f.read(MIB):
            rest += len(chunk)
    assert first == block and rest == 63 * MIB


def test_prefixes_list_move_and_delete_like_directories(s3_bucket: Bucket, tmp_path: Path) -> None:
    store = store_of(s3_bucket)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    assert store.put_dir("runs/r/adapter", src) == [
        "runs/r/adapter/a.txt",
        "runs/r/adapter/sub/b.txt",
    ]
    store.put_bytes("runs/r2/adapter/c.txt", b"c")
    assert store.list("runs/r") == ["runs/r/adapter/a.txt", "runs/r/adapter/sub/b.txt"]
    assert store.list("runs/r/adapter/a.txt") == ["runs/r/adapter/a.txt"]
    assert store.exists("runs/r/adapter") and not store.exists("runs/r/nothing")
    out = store.get_dir("runs/r/adapter", tmp_path / "out")
    assert (out / "sub" / "b.txt").read_text() == "b"
    store.move("runs/r/adapter/a.txt", "runs/r/moved.txt")
    assert store.get_bytes("runs/r/moved.txt") == b"a" and not store.exists("runs/r/adapter/a.txt")
    with pytest.raises(FileNotFoundError):
        store.move("runs/r/adapter/a.txt", "runs/r/again.txt")
    with pytest.raises(FileNotFoundError):
        store.open("runs/none")
    store.delete("runs/r")
    assert store.list("") == ["runs/r2/adapter/c.txt"]
    with pytest.raises(ValueError, match="leaves the store"):
        store.put_bytes("../escape", b"x")


def test_a_store_that_cannot_be_reached_is_named_with_the_settings_to_check(
    s3_bucket: Bucket,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    store = open_blob_store(
        "s3://nowhere/p",
        S3Options(endpoint_url=f"http://127.0.0.1:{closed}", region=REGION, path_style=True),
        {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
    )
    with pytest.raises(StoreUnreachable) as caught:
        store.check()
    message = caught.value.message
    assert message.startswith("The blob store s3://nowhere/p could not be reached (")
    assert "check trainer.storage.url, trainer.storage.s3.endpoint-url" in message
    missing = store_of(Bucket(s3_bucket.server, "no-such-bucket"))
    with pytest.raises(
        StoreUnreachable, match=r"s3://no-such-bucket/trainer could not be reached \(404"
    ):
        missing.check()


def test_an_unknown_scheme_is_refused_by_its_setting() -> None:
    with pytest.raises(ValueError) as caught:
        open_blob_store("gs://bucket/prefix")
    assert str(caught.value) == (
        "trainer.storage.url 'gs://bucket/prefix' is not supported; use file:///PATH for a "
        "local directory or s3://BUCKET/PREFIX for an S3-compatible bucket"
    )
