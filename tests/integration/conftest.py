"""The integration tests' `trainer`: a trainer process running scripted jobs, with project
``maths`` and its dataset ``maths/train``. A module sets how long a scripted step takes by
defining its own `scripted_env`; a module that needs another trainer defines its own
`trainer`."""

from __future__ import annotations

from typing import Any

import pytest

from akka_training.testing.service import TrainerProcess
from tests.integration.helpers import ensure_project, register_dataset, scripted_settings


@pytest.fixture
def scripted_env() -> dict[str, str]:
    """The environment of `trainer`'s process, read by its scripted jobs."""
    return {"AKKA_SCRIPTED_STEP_SECONDS": "0.25"}


@pytest.fixture
def trainer(trainer_factory: Any, scripted_env: dict[str, str]) -> TrainerProcess:
    t: TrainerProcess = trainer_factory(scripted_settings(), env=scripted_env)
    ensure_project(t, "maths")
    register_dataset(t, "maths/train")
    return t
