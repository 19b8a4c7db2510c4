"""A run's adapter (or merged model) as it leaves the trainer: the manifest of its files in the
Hugging Face layout, each with its size and sha256, which the client downloads one at a time
and checks; what a merge is asked with; and what a download wrote."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from akka_training.api.base import RequestBody, ResponseBody, optional_key
from akka_training.core.bounds import Name

__all__ = ["AdapterFile", "AdapterManifest", "Downloaded", "MergeRequest"]


class AdapterFile(ResponseBody):
    path: str = Field(description="Relative to the download's directory, slash-separated.")
    bytes: int
    sha256: str


class AdapterManifest(ResponseBody):
    """What `runs download` (kind ``adapter``) or `runs export --merged` (kind ``merged``)
    writes: every file, fetched from ``…/files/{path}``."""

    run: str
    project: str
    kind: Literal["adapter", "merged"]
    snapshot: str | None = Field(description="The snapshot whose weights these are; None: final.")
    step: int = Field(description="The training step the weights are from.")
    directory: str = Field(description="The directory name a download writes to by default.")
    base_model: str = Field(description="The catalog id of the base model.")
    base_model_name_or_path: str = Field(
        description="How the files name the base model: its hub id, else its catalog id."
    )
    files: list[AdapterFile]
    total_bytes: int


class MergeRequest(RequestBody):
    snapshot: Name | None = Field(None, description="Merge this snapshot's weights; None: final.")


class Downloaded(ResponseBody):
    """What a download wrote (``runs download -o json``, ``runs export -o json``)."""

    run: str
    kind: Literal["adapter", "merged"]
    snapshot: str | None
    step: int
    directory: str = Field(description="The absolute path of the directory written.")
    base_model_name_or_path: str
    files: list[AdapterFile]
    total_bytes: int
    task: str | None = optional_key("The merge task that made a merged model.")
