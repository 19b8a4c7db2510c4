"""The app in this process for the router tests, on SQLite and on Postgres: one deployment with
project `maths` (quota 2) from its settings and the development catalog."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from akka_training.testing.app import InProcessTrainer


@pytest.fixture
def trainer(in_process_factory: Callable[..., InProcessTrainer]) -> InProcessTrainer:
    return in_process_factory({"trainer": {"projects": [{"name": "maths", "quota": 2}]}})


@pytest.fixture
def api(trainer: InProcessTrainer) -> httpx.Client:
    """The admin's client."""
    return trainer.client()
