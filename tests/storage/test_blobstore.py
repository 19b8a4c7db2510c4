from pathlib import Path

import pytest

from akka_training.blobstore import open_blob_store


def test_writes_are_atomic(tmp_path: Path) -> None:
    store = open_blob_store(f"file://{tmp_path / 'b'}")
    writer = store.writer("datasets/a.jsonl")
    writer.write(b"half")
    assert not store.exists("datasets/a.jsonl")
    writer.abort()
    assert not store.exists("datasets/a.jsonl")
    assert store.list("") == []
    with pytest.raises(RuntimeError), store.writer("datasets/a.jsonl") as w:
        w.write(b"x")
        raise RuntimeError
    assert store.list("") == []
    store.put_bytes("datasets/a.jsonl", b"whole")
    assert store.get_bytes("datasets/a.jsonl") == b"whole"


def test_directories_round_trip_and_delete(tmp_path: Path) -> None:
    store = open_blob_store(str(tmp_path / "b"))
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    assert store.put_dir("runs/r/adapter", src) == [
        "runs/r/adapter/a.txt",
        "runs/r/adapter/sub/b.txt",
    ]
    out = store.get_dir("runs/r/adapter", tmp_path / "out")
    assert (out / "sub" / "b.txt").read_text() == "b"
    store.delete("runs/r")
    assert store.list("runs") == []


def test_keys_cannot_leave_the_store(tmp_path: Path) -> None:
    store = open_blob_store(str(tmp_path / "b"))
    with pytest.raises(ValueError):
        store.put_bytes("../escape", b"x")


def test_move_renames_a_blob(tmp_path: Path) -> None:
    store = open_blob_store(str(tmp_path / "b"))
    store.put_bytes("datasets/uploads/u1.jsonl", b"rows")
    store.move("datasets/uploads/u1.jsonl", "datasets/sha256/abc.jsonl")
    assert store.get_bytes("datasets/sha256/abc.jsonl") == b"rows"
    assert store.list("datasets") == ["datasets/sha256/abc.jsonl"]
    with pytest.raises(FileNotFoundError):
        store.move("datasets/uploads/u1.jsonl", "datasets/sha256/abc.jsonl")
