"""The development catalog: what the service lists for the development models. Importing this
module needs no torch, so the service reads the built models' markers with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MARKER = "akka-devmodel.json"
CONTEXT_LENGTH = 2048
DEV_MODEL_IDS: tuple[str, ...] = ("tiny-chat", "tiny-vision")
# Bump when anything a build writes changes: a directory built by another version is rebuilt.
BUILDER_VERSION = 2


def catalog_entry(model_id: str, path: Path, revision: str, modality: str) -> dict[str, Any]:
    """The catalog entry of a development model: TRL envelopes at 1 GPU in FP32 for every method
    (dpo on the text model only),
    and verl envelopes for reinforcement at 1, 2, 4 and 8 GPUs in BF16."""
    envelopes: list[dict[str, Any]] = [
        {
            "method": method,
            "engine": "trl",
            "gpus": 1,
            "precision": "FP32",
            "gpuMemoryGib": 2.0,
            "hostMemoryGib": 4.0,
        }
        # Preference training over images is not tested here: dpo on the text model only.
        for method in ("sft", "dpo", "grpo", "gspo")
        if method != "dpo" or modality == "text"
    ]
    envelopes += [
        {
            "method": method,
            "engine": "verl",
            "gpus": gpus,
            "precision": "BF16",
            "gpuMemoryGib": 4.0,
            "hostMemoryGib": 8.0 * gpus,
        }
        for method in ("grpo", "gspo")
        for gpus in (1, 2, 4, 8)
    ]
    return {
        "id": model_id,
        "path": str(path),
        "revision": revision,
        "modality": modality,
        "contextLength": CONTEXT_LENGTH,
        "envelopes": envelopes,
    }


def all_built(directory: Path) -> bool:
    """Whether every development model under `directory` was built by this `BUILDER_VERSION`:
    then a build would keep them all, and a caller can skip importing the training stack."""
    for model_id in DEV_MODEL_IDS:
        try:
            marker = json.loads((directory / model_id / MARKER).read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(marker, dict) or marker.get("builder") != BUILDER_VERSION:
            return False
    return True


def read_catalog(directory: Path) -> list[dict[str, Any]]:
    """The catalog entries of the development models built under `directory` (those whose
    marker exists), without importing the training stack."""
    out = []
    for model_id in DEV_MODEL_IDS:
        marker = directory / model_id / MARKER
        if marker.is_file():
            built = json.loads(marker.read_text())
            out.append(catalog_entry(model_id, marker.parent, built["revision"], built["modality"]))
    return out
