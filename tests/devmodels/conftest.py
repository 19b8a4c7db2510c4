"""The development models' catalog entries, from the models the root fixture built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from akka_training.devmodels.catalog import read_catalog


@pytest.fixture(scope="session")
def catalog(dev_models: Path) -> dict[str, dict[str, Any]]:
    """Catalog entries by model id (the models are built already: this reads their markers, and
    loads no training stack)."""
    return {entry["id"]: entry for entry in read_catalog(dev_models.resolve())}
