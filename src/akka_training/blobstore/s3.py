"""A blob store in an S3-compatible bucket (AWS S3, MinIO, Ceph RGW, …), through boto3.

``s3://BUCKET/PREFIX``: every key lives below PREFIX. boto3's low-level client is used on
purpose: a writer holds one part in memory (``part-size-mib``, 8 MiB by default), uploads it as
a part of a multipart upload as soon as it is full, and completes the upload on `commit()`; the
object appears under its key only then (S3 publishes a multipart upload atomically), and
`abort()` aborts the upload, so a refused or broken write leaves nothing behind. A blob smaller
than one part is one ``PutObject``. Reads stream the object's body.

Uploads a crash left open (never completed nor aborted) are listed and aborted by
`abandoned_uploads` / `abort_upload`, which the service's start-up cleanup calls.
"""

from __future__ import annotations

import builtins
import io
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, BinaryIO
from urllib.parse import urlparse

from akka_training.blobstore.base import BlobStore, BlobWriter
from akka_training.core.storage import S3Options, StoreUnreachable, unreachable_message

_MISSING = {"404", "NoSuchKey", "NotFound", "NoSuchUpload"}


def _boto() -> tuple[Any, Any, Any]:
    import boto3
    import botocore.config
    import botocore.exceptions

    return boto3, botocore.config, botocore.exceptions


class _Body(io.RawIOBase):
    """An object's streaming body as a raw file, so that reads come a chunk at a time."""

    def __init__(self, body: Any) -> None:
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._body.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        return n

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class _S3Writer(BlobWriter):
    def __init__(self, store: S3BlobStore, key: str) -> None:
        self._store = store
        self._key = key
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._done = False
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            self._buffer += data
            while len(self._buffer) >= self._store.part_size:
                part = bytes(self._buffer[: self._store.part_size])
                del self._buffer[: self._store.part_size]
                self._upload_part(part)

    def _upload_part(self, data: bytes) -> None:
        client = self._store.client
        with self._store.reaching():
            if self._upload_id is None:
                self._upload_id = client.create_multipart_upload(
                    Bucket=self._store.bucket, Key=self._key
                )["UploadId"]
            number = len(self._parts) + 1
            answer = client.upload_part(
                Bucket=self._store.bucket,
                Key=self._key,
                UploadId=self._upload_id,
                PartNumber=number,
                Body=data,
            )
        self._parts.append({"PartNumber": number, "ETag": answer["ETag"]})

    def commit(self) -> None:
        with self._lock:
            client = self._store.client
            try:
                if self._upload_id is None:
                    with self._store.reaching():
                        client.put_object(
                            Bucket=self._store.bucket, Key=self._key, Body=bytes(self._buffer)
                        )
                else:
                    if self._buffer:
                        self._upload_part(bytes(self._buffer))
                    with self._store.reaching():
                        client.complete_multipart_upload(
                            Bucket=self._store.bucket,
                            Key=self._key,
                            UploadId=self._upload_id,
                            MultipartUpload={"Parts": self._parts},
                        )
            except BaseException:
                self._abort()
                raise
            self._buffer = bytearray()
            self._done = True

    def abort(self) -> None:
        with self._lock:
            self._abort()

    def _abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._buffer = bytearray()
        if self._upload_id is not None:
            self._store.abort_upload(self._key, self._upload_id, absolute=True)


class S3BlobStore(BlobStore):
    def __init__(
        self,
        url: str,
        options: S3Options | None = None,
        credentials: dict[str, str | None] | None = None,
        where: str = "trainer.storage",
    ) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"{url!r} is not an s3://BUCKET/PREFIX URL")
        self.url = url.rstrip("/")
        self.bucket = parsed.netloc
        prefix = parsed.path.strip("/")
        self.prefix = f"{prefix}/" if prefix else ""
        self.options = options or S3Options()
        self.part_size = self.options.part_size_mib * 2**20
        self.where = where
        boto3, config, exceptions = _boto()
        self._errors = exceptions
        creds = {k: v for k, v in (credentials or {}).items() if v}
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=self.options.endpoint_url,
            region_name=self.options.region,
            aws_access_key_id=creds.get("access_key_id"),
            aws_secret_access_key=creds.get("secret_access_key"),
            aws_session_token=creds.get("session_token"),
            config=config.Config(
                s3={"addressing_style": "path" if self.options.path_style else "auto"},
                retries={"max_attempts": 4, "mode": "standard"},
                connect_timeout=5,
                read_timeout=60,
                # Checksums only where the API requires them: S3-compatible stores differ.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    # --- keys ----------------------------------------------------------------------------------

    def _key(self, key: str) -> str:
        key = key.strip("/")
        parts = key.split("/")
        if not key or ".." in parts or "." in parts or key.startswith(".tmp"):
            raise ValueError(f"blob key {key!r} leaves the store")
        return self.prefix + key

    def _relative(self, absolute: str) -> str:
        return absolute[len(self.prefix) :]

    # --- errors --------------------------------------------------------------------------------

    def reaching(self) -> AbstractContextManager[None]:
        """A context that turns a failure to reach the store into `StoreUnreachable`."""
        return _reaching(self)

    def _missing(self, exc: BaseException) -> bool:
        if isinstance(exc, self._errors.ClientError):
            return str(exc.response.get("Error", {}).get("Code")) in _MISSING
        return False

    def check(self) -> None:
        """Reach the bucket once (start-up): `StoreUnreachable` naming the URL and settings."""
        with self.reaching():
            self.client.head_bucket(Bucket=self.bucket)

    # --- the interface -------------------------------------------------------------------------

    def writer(self, key: str) -> BlobWriter:
        return _S3Writer(self, self._key(key))

    def open(self, key: str) -> BinaryIO:
        try:
            with self.reaching():
                answer = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except StoreUnreachable as exc:
            if self._missing(exc.__cause__ or exc):
                raise FileNotFoundError(key) from None
            raise
        return io.BufferedReader(_Body(answer["Body"]), buffer_size=1 << 20)

    def _head(self, key: str) -> dict[str, Any] | None:
        answer: dict[str, Any] | None = None
        try:
            with self.reaching():
                answer = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except StoreUnreachable as exc:
            if not self._missing(exc.__cause__ or exc):
                raise
        return answer

    def exists(self, key: str) -> bool:
        if self._head(key) is not None:
            return True
        # A prefix exists when it holds a blob, as a directory does.
        return bool(self._list_absolute(self._key(key) + "/", limit=1))

    def size(self, key: str) -> int:
        head = self._head(key)
        if head is None:
            raise FileNotFoundError(key)
        return int(head["ContentLength"])

    def delete(self, key: str) -> None:
        absolute = self._key(key)
        doomed = [absolute, *self._list_absolute(absolute + "/")]
        with self.reaching():
            for start in range(0, len(doomed), 1000):
                batch = doomed[start : start + 1000]
                self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )

    def list(self, prefix: str) -> builtins.list[str]:
        if not prefix.strip("/"):
            found = self._list_absolute(self.prefix)
        else:
            absolute = self._key(prefix)
            found = self._list_absolute(absolute + "/")
            if not found and self._head(prefix) is not None:
                found = [absolute]
        return sorted(self._relative(k) for k in found)

    def move(self, src: str, dst: str) -> None:
        source, dest = self._key(src), self._key(dst)
        if self._head(src) is None:
            raise FileNotFoundError(src)
        with self.reaching():
            # Managed copy: a server-side copy, in parts for a large object.
            self.client.copy(
                {"Bucket": self.bucket, "Key": source},
                self.bucket,
                dest,
                Config=_transfer_config(self.part_size),
            )
            self.client.delete_object(Bucket=self.bucket, Key=source)

    # --- crash leftovers -----------------------------------------------------------------------

    def abandoned_uploads(self) -> builtins.list[tuple[str, str, datetime]]:
        """Multipart uploads under this store's prefix that were never completed nor aborted:
        (key, upload id, when it was started)."""
        out = []
        with self.reaching():
            pages = self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for upload in page.get("Uploads", []):
                    out.append((upload["Key"], upload["UploadId"], upload["Initiated"]))
        return out

    def abort_upload(self, key: str, upload_id: str, absolute: bool = False) -> None:
        try:
            with self.reaching():
                self.client.abort_multipart_upload(
                    Bucket=self.bucket,
                    Key=key if absolute else self._key(key),
                    UploadId=upload_id,
                )
        except StoreUnreachable as exc:
            if not self._missing(exc.__cause__ or exc):
                raise

    def modified(self, key: str) -> datetime:
        head = self._head(key)
        if head is None:
            raise FileNotFoundError(key)
        when: datetime = head["LastModified"]
        return when

    def abort_partial_writes(self, older_than: datetime) -> int:
        removed = 0
        for key, upload_id, started in self.abandoned_uploads():
            if started < older_than:
                self.abort_upload(key, upload_id, absolute=True)
                removed += 1
        return removed

    def listed_with_times(self, prefix: str) -> builtins.list[tuple[str, datetime]]:
        """Keys under `prefix` with their last-modified times (one listing, no head requests)."""
        out = []
        absolute = self._key(prefix) + "/" if prefix.strip("/") else self.prefix
        with self.reaching():
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=absolute
            )
            for page in pages:
                for item in page.get("Contents", []):
                    out.append((self._relative(item["Key"]), item["LastModified"]))
        return out

    # --- helpers -------------------------------------------------------------------------------

    def _list_absolute(self, absolute_prefix: str, limit: int | None = None) -> builtins.list[str]:
        keys: builtins.list[str] = []
        with self.reaching():
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=absolute_prefix
            )
            for page in pages:
                keys.extend(item["Key"] for item in page.get("Contents", []))
                if limit is not None and len(keys) >= limit:
                    return keys[:limit]
        return keys


def _transfer_config(part_size: int) -> Any:
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size)


@contextmanager
def _reaching(store: S3BlobStore) -> Iterator[None]:
    errors = store._errors
    try:
        yield
    except (errors.ClientError, errors.BotoCoreError) as exc:
        if isinstance(exc, errors.ClientError):
            error = exc.response.get("Error", {})
            why = f"{error.get('Code', 'error')}: {error.get('Message', '')}".rstrip(": ")
        else:
            why = str(exc)
        raise StoreUnreachable(unreachable_message(store.url, why, store.where)) from exc
