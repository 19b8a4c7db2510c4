"""The trainer's typed HTTP client, used by the CLI and by users from Python.

    from akka_training.client import connect
    with connect() as trainer:          # found as the CLI finds it
        print(trainer.info().engine)

    async with AsyncTrainerClient.wrapping(connect()) as trainer:   # every call awaited
        print((await trainer.info()).engine)

Every answer is a model of `akka_training.api`; every error is an exception of
`akka_training.core.errors`. `contexts` reads and writes the CLI's configuration file.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from akka_training.client.async_trainer import AsyncTrainerClient
    from akka_training.client.connection import Connection, connect, resolve
    from akka_training.client.trainer import TrainerClient

__all__ = ["AsyncTrainerClient", "Connection", "TrainerClient", "connect", "resolve"]

_HOMES = {
    "AsyncTrainerClient": "akka_training.client.async_trainer",
    "Connection": "akka_training.client.connection",
    "connect": "akka_training.client.connection",
    "resolve": "akka_training.client.connection",
    "TrainerClient": "akka_training.client.trainer",
}


def __getattr__(name: str) -> Any:
    # Loaded on first use: the CLI reads its contexts file through `client.contexts` without
    # paying for httpx, pydantic and the API's models on every start.
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
