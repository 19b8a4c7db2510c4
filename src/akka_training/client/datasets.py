"""Datasets: register (streamed), list, get, versions, aliases."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast
from urllib.parse import quote

from akka_training import api
from akka_training.client.base import BaseClient
from akka_training.core.errors import InvalidRequest
from akka_training.core.refs import BadReference, parse_ref

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.datasets  # noqa: F401

# Bytes read and sent at a time: large enough that the upload is not bound by per-chunk costs.
CHUNK_BYTES = 1024 * 1024
# The server may finish validating and syncing a large file after the last byte arrives.
UPLOAD_TIMEOUT = 600.0


class DatasetsApi(BaseClient):
    def register_dataset(
        self,
        name: str,
        source: str | Path | BinaryIO | Iterable[bytes],
        *,
        alias: str | None = None,
        size: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> api.datasets.Registered:
        """Stream a JSONL file into a new version of `name` (``PROJECT/NAME``); returns the
        version, with ``.created`` false when the same content was registered before. `source` is
        a path, a binary file or an iterable of bytes; `size` (known for a path) lets the trainer
        refuse an over-limit file before it is sent; `progress` is called with each chunk's
        length as it is sent."""
        project, dataset = _split_name(name)
        if isinstance(source, str | Path):
            path = Path(source)
            with open(path, "rb") as f:
                return self.register_dataset(
                    name, f, alias=alias, size=os.fstat(f.fileno()).st_size, progress=progress
                )
        chunks = _read_chunks(cast(BinaryIO, source)) if hasattr(source, "read") else iter(source)
        if progress is not None:
            chunks = _reporting(chunks, progress)
        headers = {"Content-Type": "application/x-ndjson"}
        if size is not None:
            headers["Content-Length"] = str(size)
        return self.call(
            api.datasets.Registered,
            "POST",
            f"/v1/datasets/{project}/{dataset}",
            params={"alias": alias},
            content=chunks,
            headers=headers,
            timeout=UPLOAD_TIMEOUT,
        )

    def datasets(self, project: str | None = None) -> list[api.datasets.DatasetSummary]:
        """Every dataset name you can see (or one project's), with its newest version."""
        return self.call(
            list[api.datasets.DatasetSummary], "GET", "/v1/datasets", params={"project": project}
        )

    def dataset(self, ref: str) -> api.datasets.DatasetDetail:
        """The version a reference names (``PROJECT/NAME[:vN|:ALIAS|@sha256:PREFIX]``), with
        the list of its name's versions."""
        return self.call(api.datasets.DatasetDetail, "GET", _path(ref))

    def dataset_versions(self, name: str) -> list[api.datasets.DatasetVersion]:
        """Every version of ``PROJECT/NAME``, oldest first."""
        return self.call(list[api.datasets.DatasetVersion], "GET", _path(name) + "/versions")

    def set_dataset_alias(self, ref: str, alias: str) -> api.datasets.AliasSet:
        """Point `alias` at the version `ref` names; ``previous`` says where it pointed."""
        return self.call(
            api.datasets.AliasSet, "PUT", _path(ref) + f"/aliases/{quote(alias, safe='')}"
        )


def _split_name(name: str) -> tuple[str, str]:
    try:
        ref = parse_ref(name)
    except BadReference as exc:
        raise InvalidRequest(str(exc)) from None
    if ref.version is not None or ref.alias or ref.digest:
        raise InvalidRequest(
            f"Register under PROJECT/NAME ({ref.full_name}), not {name}: the trainer numbers "
            "versions itself; use --alias to name the new version."
        )
    return ref.project, ref.name


def _path(ref: str) -> str:
    project, slash, rest = ref.strip().partition("/")
    if not slash or not project or not rest:
        raise InvalidRequest(
            f"{ref!r} is not a reference; write PROJECT/NAME, PROJECT/NAME:vN, "
            "PROJECT/NAME:ALIAS or PROJECT/NAME@sha256:HASH"
        )
    return f"/v1/datasets/{quote(project, safe='')}/{quote(rest, safe=':@')}"


def _read_chunks(f: BinaryIO) -> Iterator[bytes]:
    while chunk := f.read(CHUNK_BYTES):
        yield chunk


def _reporting(chunks: Iterator[bytes], progress: Callable[[int], None]) -> Iterator[bytes]:
    for chunk in chunks:
        yield chunk
        progress(len(chunk))
