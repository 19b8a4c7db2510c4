"""The development catalog: tiny models the project builds itself (random weights, a tokenizer
trained on the fly) so the embedded default and the tests train for real without a model hub.

The service never imports torch: it reads the models' markers, and when a model is missing it
runs the builder (`python -m akka_training.devmodels build DIR`) as a child process.
"""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

from akka_training.core.catalog import CatalogModel
from akka_training.core.errors import ServiceUnavailable
from akka_training.devmodels.catalog import DEV_MODEL_IDS, read_catalog

log = logging.getLogger(__name__)


# What building the development models imports (the `train` extra).
BUILD_MODULES = ("torch", "transformers", "tokenizers")


def missing_build_module() -> str | None:
    """The first module the builder needs that this installation lacks (found without
    importing it: the service never imports torch)."""
    for name in BUILD_MODULES:
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
        if found is None:
            return name
    return None


def load_dev_catalog(directory: Path, build: bool = True) -> list[CatalogModel]:
    entries = read_catalog(directory)
    if len(entries) < len(DEV_MODEL_IDS) and build:
        missing = missing_build_module()
        if missing is not None:
            raise ServiceUnavailable(
                "With no trainer.catalog in its settings the trainer serves the development "
                f"models ({', '.join(DEV_MODEL_IDS)}), and building them needs the training "
                f"stack, which this installation lacks (no module '{missing}'): install it "
                "with pip install 'akka-training[train]', or name your base models in "
                "trainer.catalog."
            )
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
        entries = read_catalog(directory)
    return [CatalogModel.model_validate(e) for e in entries]
