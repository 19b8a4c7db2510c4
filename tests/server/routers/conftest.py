"""The router tests' `api`: the admin's client of `trainer` (`tests/server/conftest.py`)."""

from __future__ import annotations

import httpx
import pytest

from akka_training.testing.app import InProcessTrainer


@pytest.fixture
def api(trainer: InProcessTrainer) -> httpx.Client:
    """The admin's client."""
    return trainer.client()
