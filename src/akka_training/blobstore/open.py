"""Choose a blob store from its URL."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from akka_training.blobstore.base import BlobStore
from akka_training.blobstore.local import LocalBlobStore


def open_blob_store(url: str) -> BlobStore:
    """``file:///abs/dir`` or a plain path: a local directory."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return LocalBlobStore(Path(parsed.path if parsed.scheme else url))
    raise ValueError(
        f"trainer.storage.url {url!r} is not supported; use file:///PATH for a local directory"
    )
