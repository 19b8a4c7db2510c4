"""Scoring bundles: Python code for `rule` reward terms and tools, versioned by content."""

from __future__ import annotations

from akka_training.api.base import ResponseBody, Timestamp, flag_key


class Bundle(ResponseBody):
    ref: str
    project: str
    name: str
    version: int
    sha256: str
    bytes: int
    files: list[str]
    created_at: Timestamp
    existing: bool = flag_key("True: the same content was registered before, as this version.")
