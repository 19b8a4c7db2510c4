"""Datasets: immutable, content-hashed versions of JSONL rows, numbered per name, with
movable aliases. A version's reference is ``PROJECT/NAME:vN``."""

from __future__ import annotations

from pydantic import Field

from akka_training.api.base import ResponseBody, Timestamp


class DatasetVersion(ResponseBody):
    ref: str = Field(description="The pinned reference, PROJECT/NAME:vN.")
    dataset: str = Field(description="PROJECT/NAME.")
    project: str
    name: str
    version: int
    latest: bool = Field(description="Whether this is the newest version of its name.")
    sha256: str
    rows: int
    bytes: int
    format: str = Field(description="chat, prompt-completion or preference.")
    has_images: bool
    aliases: list[str] = Field(description="The aliases that point at this version.")
    blob: str
    created_at: Timestamp


class DatasetDetail(DatasetVersion):
    versions: list[DatasetVersion] = Field(description="Every version of its name, oldest first.")


class Registered(DatasetVersion):
    """The version an upload made, or the one that already held the same content."""

    created: bool = Field(description="False: the same content was registered before.")
    alias: str | None = Field(description="The alias the upload pointed at the version.")
    previous: int | None = Field(description="The version the alias pointed at before.")


class AliasSet(DatasetVersion):
    alias: str
    previous: int | None = Field(description="The version the alias pointed at before, if any.")


class DatasetSummary(ResponseBody):
    """A dataset name with its newest version."""

    dataset: str
    project: str
    name: str
    latest: int = Field(description="The newest version's number.")
    versions: int = Field(description="How many versions the name has.")
    rows: int
    bytes: int
    format: str
    has_images: bool
    sha256: str
    aliases: dict[str, int] = Field(description="Every alias of the name and its version.")
    updated_at: Timestamp
