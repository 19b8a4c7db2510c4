"""The development models, built once into the repository's cache directory and shared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from akka_training.devmodels import build_dev_models

CACHE = Path(__file__).resolve().parents[2] / ".cache" / "devmodels"


@pytest.fixture(scope="session")
def dev_models() -> dict[str, dict[str, Any]]:
    return {entry["id"]: entry for entry in build_dev_models(CACHE)}
