"""The development catalog: tiny models the project builds itself (random weights, a tokenizer
trained on the fly) so the embedded default and the tests train for real without a model hub.

The service never imports torch: it reads the models' marker files, and when they are missing it
runs the builder (`python -m akka_training.devmodels build DIR`) as a child process.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from akka_training.core.catalog import CatalogModel
from akka_training.core.errors import ServiceUnavailable

log = logging.getLogger(__name__)

MARKER = "akka-devmodel.json"
EXPECTED = ("tiny-chat", "tiny-vision")


def load_dev_catalog(directory: Path, build: bool = True) -> list[CatalogModel]:
    models = _read(directory)
    if len(models) < len(EXPECTED) and build:
        log.info("building the development models in %s", directory)
        directory.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [sys.executable, "-m", "akka_training.devmodels", "build", str(directory)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ServiceUnavailable(
                "The development models could not be built (install the training extra: "
                f"pip install 'akka-training[train]'):\n{proc.stderr[-2000:]}"
            )
        models = _read(directory)
    return models


def _read(directory: Path) -> list[CatalogModel]:
    out = []
    for model_id in EXPECTED:
        marker = directory / model_id / MARKER
        if not marker.is_file():
            continue
        entry = json.loads(marker.read_text())
        entry = entry.get("catalog", entry)
        entry["path"] = str(marker.parent)
        out.append(CatalogModel.model_validate(entry))
    return out
