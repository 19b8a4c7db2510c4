"""Choose a blob store from its URL."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from akka_training.blobstore.base import BlobStore
from akka_training.blobstore.local import LocalBlobStore
from akka_training.core.storage import S3Options, StorageSpec


def open_blob_store(
    url: str | StorageSpec,
    s3: S3Options | None = None,
    credentials: dict[str, str | None] | None = None,
    where: str = "trainer.storage",
) -> BlobStore:
    """``file:///abs/dir`` or a plain path: a local directory; ``s3://BUCKET/PREFIX``: an
    S3-compatible bucket, reached with `s3` (endpoint, region, addressing) and `credentials`
    (else boto3's own chain: the AWS_* environment, ~/.aws files, the instance's role)."""
    if isinstance(url, StorageSpec):
        s3 = url.s3
        url = url.url
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return LocalBlobStore(Path(parsed.path if parsed.scheme else url))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"{where}.url {url!r} names no bucket; use s3://BUCKET/PREFIX")
        from akka_training.blobstore.s3 import S3BlobStore

        return S3BlobStore(url, s3, credentials, where)
    raise ValueError(
        f"{where}.url {url!r} is not supported; use file:///PATH for a local directory or "
        "s3://BUCKET/PREFIX for an S3-compatible bucket"
    )
