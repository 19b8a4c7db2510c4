"""A blob store in a local directory (the embedded default)."""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from akka_training.blobstore.base import BlobStore, BlobWriter

# A large blob is handed to the disk every this many bytes as it is written (writeback starts,
# the writer does not wait for it), so that commit's fsync waits for the last few MiB instead of
# writing the whole blob out then: for a 256 MiB dataset upload, about 0.1 s less at the end
# (bench/upload.py).
WRITEBACK_BYTES = 8 * 1024 * 1024

# How often a rename is tried while deletes of other keys keep removing its folder.
RENAME_TRIES = 100


def _replace(source: Path, dest: Path) -> None:
    """Renames ``source`` onto ``dest``, making ``dest``'s folders.

    A delete of another key removes the folders it leaves empty, and one of them may be
    ``dest``'s, emptied between making it and the rename: then it is made again and the rename
    retried, as long as ``source`` is still there.
    """
    for _ in range(RENAME_TRIES - 1):
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, dest)
            return
        except FileNotFoundError:
            if not source.exists():
                raise
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, dest)


class _LocalWriter(BlobWriter):
    def __init__(self, dest: Path, tmp_dir: Path) -> None:
        self._dest = dest
        fd, name = tempfile.mkstemp(prefix=".part-", dir=tmp_dir)
        self._tmp = Path(name)
        self._file = os.fdopen(fd, "wb")
        self._done = False
        self._written = 0
        self._handed = 0  # bytes whose writeback has been started
        self._writeback = hasattr(os, "posix_fadvise")

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._written += len(data)
        if self._writeback and self._written - self._handed >= WRITEBACK_BYTES:
            self._start_writeback()

    def _start_writeback(self) -> None:
        # POSIX_FADV_DONTNEED starts writeback of the range's dirty pages without waiting for it
        # (Linux); pages still being written stay cached. Only advice: where it fails, the
        # commit's fsync writes everything as before.
        self._file.flush()
        try:
            os.posix_fadvise(
                self._file.fileno(),
                self._handed,
                self._written - self._handed,
                os.POSIX_FADV_DONTNEED,
            )
        except OSError:
            self._writeback = False
            return
        self._handed = self._written

    def commit(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        _replace(self._tmp, self._dest)
        self._done = True

    def abort(self) -> None:
        if self._done:
            return
        self._file.close()
        self._tmp.unlink(missing_ok=True)
        self._done = True


class LocalBlobStore(BlobStore):
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.url = f"file://{self.root}"
        self._tmp = self.root / ".tmp"
        self._tmp.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        key = key.strip("/")
        path = (self.root / key).resolve()
        if key.startswith(".tmp") or not path.is_relative_to(self.root) or path == self.root:
            raise ValueError(f"blob key {key!r} leaves the store")
        return path

    def writer(self, key: str) -> BlobWriter:
        return _LocalWriter(self._path(key), self._tmp)

    def move(self, src: str, dst: str) -> None:
        source, dest = self._path(src), self._path(dst)
        if not source.is_file():
            raise FileNotFoundError(src)
        _replace(source, dest)

    def open(self, key: str) -> BinaryIO:
        path = self._path(key)
        if not path.is_file():
            raise FileNotFoundError(key)
        return open(path, "rb")

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def size(self, key: str) -> int:
        return self._path(key).stat().st_size

    def delete(self, key: str) -> None:
        path = self._path(key)
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        # A key's folders exist for it alone: those it leaves empty go with it.
        parent = path.parent
        while parent != self.root and parent.is_relative_to(self.root):
            try:
                parent.rmdir()
            except OSError:  # not empty (or already gone)
                break
            parent = parent.parent

    def remove_empty_folders(self) -> int:
        removed = 0
        folders = sorted(
            (p for p in self.root.rglob("*") if p.is_dir() and not p.is_relative_to(self._tmp)),
            key=lambda p: len(p.parts),
            reverse=True,
        )
        for folder in folders:
            try:
                folder.rmdir()
                removed += 1
            except OSError:
                continue
        return removed

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        if base.is_file():
            return [prefix.strip("/")]
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in base.rglob("*")
            if p.is_file() and not p.relative_to(self.root).as_posix().startswith(".tmp")
        )

    def modified(self, key: str) -> datetime:
        path = self._path(key)
        if not path.is_file():
            raise FileNotFoundError(key)
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)

    def abort_partial_writes(self, older_than: datetime) -> int:
        removed = 0
        for part in self._tmp.glob(".part-*"):
            try:
                if datetime.fromtimestamp(part.stat().st_mtime, UTC) < older_than:
                    part.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        return removed

    def local_path(self, key: str) -> Path | None:
        path = self._path(key)
        return path if path.exists() else None
