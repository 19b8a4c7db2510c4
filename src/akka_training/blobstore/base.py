"""The blob store interface."""

from __future__ import annotations

import abc
import builtins
from datetime import datetime
from pathlib import Path
from typing import BinaryIO


class BlobWriter(abc.ABC):
    """A blob being written. Nothing is visible under the key until `commit()`; `abort()` (or
    leaving a ``with`` block by an exception) leaves nothing behind."""

    @abc.abstractmethod
    def write(self, data: bytes) -> None: ...

    @abc.abstractmethod
    def commit(self) -> None: ...

    @abc.abstractmethod
    def abort(self) -> None: ...

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()


class BlobStore(abc.ABC):
    """Keys are relative, slash-separated paths (``datasets/sha256/ab/abcd…``). Every write is
    atomic: a reader sees the whole blob or none. Implementations are safe to share between
    threads; a call blocks until done and may be retried."""

    url: str

    def check(self) -> None:
        """Reach the store once; `StoreUnreachable` (naming the URL and the settings) when it
        cannot be reached."""

    @abc.abstractmethod
    def writer(self, key: str) -> BlobWriter:
        """Start writing the blob `key`; replaces an existing blob on commit."""

    @abc.abstractmethod
    def open(self, key: str) -> BinaryIO:
        """Read the blob `key`; FileNotFoundError when absent."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def size(self, key: str) -> int: ...

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete `key`, or every blob under it when it names a prefix. Missing is fine."""

    @abc.abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Keys of the blobs under `prefix`, sorted."""

    def move(self, src: str, dst: str) -> None:
        """Make the blob `src` readable as `dst` (replacing it; atomic for readers of `dst`) and
        remove `src`. This default copies through a writer; a store that can rename overrides it.
        FileNotFoundError when `src` is absent."""
        with self.open(src) as f, self.writer(dst) as w:
            while chunk := f.read(1 << 20):
                w.write(chunk)
            w.commit()
        self.delete(src)

    def put_bytes(self, key: str, data: bytes) -> None:
        with self.writer(key) as w:
            w.write(data)
            w.commit()

    def get_bytes(self, key: str) -> bytes:
        with self.open(key) as f:
            return f.read()

    def put_file(self, key: str, path: Path) -> None:
        with self.writer(key) as w, open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                w.write(chunk)
            w.commit()

    def put_dir(self, prefix: str, directory: Path) -> builtins.list[str]:
        """Upload every file under `directory` below `prefix`; returns the keys written."""
        keys = []
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            key = f"{prefix.rstrip('/')}/{path.relative_to(directory).as_posix()}"
            self.put_file(key, path)
            keys.append(key)
        return keys

    def get_dir(self, prefix: str, directory: Path) -> Path:
        """Download every blob under `prefix` into `directory`, keeping relative paths."""
        prefix = prefix.rstrip("/") + "/"
        directory.mkdir(parents=True, exist_ok=True)
        for key in self.list(prefix):
            dest = directory / key[len(prefix) :]
            dest.parent.mkdir(parents=True, exist_ok=True)
            with self.open(key) as src, open(dest, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
        return directory

    def listed_with_times(self, prefix: str) -> builtins.list[tuple[str, datetime]]:
        """Keys under `prefix` with when each was last written (UTC)."""
        return [(key, self.modified(key)) for key in self.list(prefix)]

    @abc.abstractmethod
    def modified(self, key: str) -> datetime:
        """When the blob `key` was last written (UTC); FileNotFoundError when absent."""

    def abort_partial_writes(self, older_than: datetime) -> int:
        """Remove what writers a crash interrupted left (temporary files, open multipart
        uploads) started before `older_than`; how many."""
        return 0

    def remove_empty_folders(self) -> int:
        """Remove folders left empty (a store with folders: deletes leave their parents);
        how many. A bucket has no folders."""
        return 0

    def local_path(self, key: str) -> Path | None:
        """A path on this host holding the blob (or the prefix's files), when there is one."""
        return None
