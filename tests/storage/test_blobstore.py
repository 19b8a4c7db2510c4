import errno
import os
from pathlib import Path

import pytest

from akka_training.blobstore import local, open_blob_store


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


@pytest.mark.parametrize("advice", ["works", "refused"])
def test_a_large_blob_is_handed_to_the_disk_as_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, advice: str
) -> None:
    # Every WRITEBACK_BYTES the writer starts writeback of what it wrote (advice to the kernel);
    # where the advice fails, the blob is written all the same and synced at commit.
    monkeypatch.setattr(local, "WRITEBACK_BYTES", 1000)
    calls: list[tuple[int, int]] = []

    def fadvise(fd: int, offset: int, length: int, what: int) -> None:
        calls.append((offset, length))
        if advice == "refused":
            raise OSError(errno.EINVAL, "no advice here")

    monkeypatch.setattr(f"{local.__name__}.os.posix_fadvise", fadvise, raising=False)
    store = open_blob_store(str(tmp_path / "b"))
    chunks = [bytes([i]) * 300 for i in range(20)]
    with store.writer("datasets/big.jsonl") as writer:
        for chunk in chunks:
            writer.write(chunk)
        writer.commit()
    assert store.get_bytes("datasets/big.jsonl") == b"".join(chunks)
    if advice == "works":
        assert calls == [(0, 1200), (1200, 1200), (2400, 1200), (3600, 1200), (4800, 1200)]
    else:
        assert calls == [(0, 1200)]  # not asked again


def test_a_write_lands_when_a_delete_of_a_sibling_empties_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between a write (or move) making its folder and its rename, the delete of the last other
    # key in that folder removes the folder, as concurrent dataset registrations did: the write
    # still lands.
    store = open_blob_store(str(tmp_path / "b"))
    rename = os.replace
    sibling: list[str] = []

    def delete_sibling_first(src: str, dst: str) -> None:
        if sibling:
            store.delete(sibling.pop())
            assert not Path(dst).parent.exists()
        rename(src, dst)

    monkeypatch.setattr(os, "replace", delete_sibling_first)
    store.put_bytes("datasets/uploads/old.jsonl", b"old")
    sibling.append("datasets/uploads/old.jsonl")
    store.put_bytes("datasets/uploads/new.jsonl", b"new")
    assert store.get_bytes("datasets/uploads/new.jsonl") == b"new"

    store.put_bytes("datasets/final/other.jsonl", b"other")
    sibling.append("datasets/final/other.jsonl")
    store.move("datasets/uploads/new.jsonl", "datasets/final/new.jsonl")
    assert not sibling
    assert store.list("datasets") == ["datasets/final/new.jsonl"]
