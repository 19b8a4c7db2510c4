"""The endpoint task (`core.serving`): load the base model and the endpoint's adapters into
the generation engine, serve the OpenAI API on this host, tell the service the address, and
keep telling it until the endpoint is deleted (the report's answer says stop).

The server listens on the address ``AKKA_ENDPOINT_HOST`` names (default 127.0.0.1: the local
backend's trainer is on this host; on a cluster the node's address)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Any

import torch

from akka_training.core.serving import ServeParams
from akka_training.core.tasks import base_model_unavailable
from akka_training.engines.failures import SourceUnavailable
from akka_training.engines.generation.engine import GenerationEngine
from akka_training.engines.model_cache import local_model
from akka_training.engines.serving.http_server import EndpointServer
from akka_training.engines.snapshots import download_adapter
from akka_training.engines.tasks.context import TaskContext, TaskError
from akka_training.engines.tasks.reporter import TaskCancelled

HOST_ENV = "AKKA_ENDPOINT_HOST"


def serve(task: TaskContext, stop: threading.Event | None = None) -> dict[str, Any]:
    params = ServeParams.model_validate(task.spec.params)
    base = params.base_model
    base.path = local_model(base.path, task.spec.storage_s3)
    if not (Path(base.path) / "config.json").is_file():
        raise TaskError(
            base_model_unavailable(base.id, base.path, f"node {socket.gethostname()}", None)
        )
    task.progress(f"loading the base model {base.id}")
    device = "cuda" if task.placement is not None and task.placement.gpus else "cpu"
    engine = GenerationEngine(Path(base.path), device=_device(device))
    for adapter in params.adapters:
        task.progress(f"loading the adapter {adapter.name}")
        try:
            directory = download_adapter(
                task.store,
                adapter.weights,
                task.workdir / "adapters" / adapter.name.replace(":", "_"),
            )
        except SourceUnavailable as exc:
            raise TaskError(f"the adapter {adapter.name} could not be read: {exc}") from exc
        engine.add_adapter(adapter.name, directory)
    server = EndpointServer(engine, os.environ.get(HOST_ENV, "127.0.0.1")).start()
    stop = stop or threading.Event()
    try:
        while True:
            task.reporter.progress("serving", address=server.address)
            if stop.wait(params.heartbeat_seconds):
                break
    except TaskCancelled:
        pass
    finally:
        server.close()
    return {"served": [a.name for a in params.adapters]}


def _device(wanted: str) -> str:
    return wanted if wanted == "cpu" or torch.cuda.is_available() else "cpu"
