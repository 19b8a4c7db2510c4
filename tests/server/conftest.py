"""The service's tests' `trainer`: the app in this process, on SQLite and on Postgres, one
deployment with project `maths` (quota 2) from its settings and the development catalog. A
module that needs other settings defines its own `trainer`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from akka_training.testing.app import InProcessTrainer


@pytest.fixture
def trainer(in_process_factory: Callable[..., InProcessTrainer]) -> InProcessTrainer:
    return in_process_factory({"trainer": {"projects": [{"name": "maths", "quota": 2}]}})
