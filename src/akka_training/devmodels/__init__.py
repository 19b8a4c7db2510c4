"""Development models: tiny random-weight models the project builds itself (no model hub), saved
in the ordinary Hugging Face layout, for tests and the demo.

``python -m akka_training.devmodels build DIR`` builds them and prints their catalog entries.
"""

from akka_training.devmodels.build import (
    BUILDER_VERSION,
    DEV_MODEL_IDS,
    build_dev_models,
    catalog_entry,
    directory_revision,
)

__all__ = [
    "BUILDER_VERSION",
    "DEV_MODEL_IDS",
    "build_dev_models",
    "catalog_entry",
    "directory_revision",
]
