"""The endpoint task (`core.serving`): load the base model and the endpoint's adapters into
the generation engine, serve the OpenAI API on this host, tell the service the address, and
keep telling it until the endpoint is deleted (the report's answer says stop), or until it has
gone `idle_minutes` without a request: then it ends with ``{"idle": true}`` and its devices go
back to the pool. Each answer
carries the endpoint's parameters as they are now: an adapter added to the endpoint is loaded,
one removed is dropped, while the server runs.

The server listens on this node's address towards the trainer (`engines.reachable`) and
answers only requests carrying the key it reports with its address (`core.serving.KEY_HEADER`).

What generates is the endpoint's engine (`engines.serving.vllm.choose_engine`): vLLM's OpenAI
server, a child process from vLLM's environment behind a relay (`VllmRelay`), or transformers
and PEFT in this process (`GenerationEngine` behind `EndpointServer`). Every report says which."""

from __future__ import annotations

import logging
import secrets
import socket
import threading
from pathlib import Path
from typing import Any, Protocol

import torch

from akka_training.core.serving import VLLM, ServedAdapter, ServeParams
from akka_training.core.tasks import base_model_unavailable
from akka_training.engines.failures import SourceUnavailable
from akka_training.engines.generation.engine import GenerationEngine
from akka_training.engines.model_cache import local_model
from akka_training.engines.reachable import listen_host
from akka_training.engines.serving.http_server import EndpointServer
from akka_training.engines.serving.keyed import Activity
from akka_training.engines.serving.vllm import VllmFailed, VllmRelay, VllmServer, choose_engine
from akka_training.engines.snapshots import download_adapter
from akka_training.engines.tasks.context import TaskContext, TaskError
from akka_training.engines.tasks.reporter import TaskCancelled

log = logging.getLogger(__name__)


def serve(task: TaskContext, stop: threading.Event | None = None) -> dict[str, Any]:
    params = ServeParams.model_validate(task.spec.params)
    base = params.base_model
    base.path = local_model(base.path, task.spec.storage_s3)
    if not (Path(base.path) / "config.json").is_file():
        raise TaskError(
            base_model_unavailable(base.id, base.path, f"node {socket.gethostname()}", None)
        )
    on_gpu = task.placement is not None and bool(task.placement.gpus)
    cuda = _device(on_gpu) == "cuda"
    try:
        kind = choose_engine(params, Path(base.path), on_gpu=cuda)
    except VllmFailed as exc:
        raise TaskError(exc.message, exc.detail) from exc
    host = listen_host(task.spec.trainer_url)
    key = secrets.token_urlsafe(24)
    server: Server
    engine: Adapters
    if kind == VLLM:
        task.progress(f"starting vLLM's server over {base.id}")
        vllm = _start_vllm(task, params, on_gpu=cuda)
        engine = vllm
        server = VllmRelay(vllm, key, host).start()
    else:
        task.progress(f"loading the base model {base.id}")
        generation = GenerationEngine(Path(base.path), device=_device(on_gpu))
        _load(task, generation, params)
        engine = generation
        server = EndpointServer(generation, key, host).start()
    stop = stop or threading.Event()
    idle_after = params.idle_minutes * 60
    went_idle = False
    try:
        while True:
            answer = task.reporter.progress("serving", address=server.address, key=key, engine=kind)
            if answer.get("params"):
                follow(task, engine, ServeParams.model_validate(answer["params"]))
            if idle_after and server.activity.idle_for() >= idle_after:
                # Its devices go back to the pool; the next request starts it again.
                went_idle = True
                break
            if stop.wait(params.heartbeat_seconds):
                break
    except TaskCancelled:
        pass
    finally:
        server.close()
    return {"served": sorted(engine.adapters), "idle": went_idle}


class Adapters(Protocol):
    """What serves the adapters: `GenerationEngine`, or vLLM's server (`VllmServer`)."""

    @property
    def adapters(self) -> dict[str, Path]: ...

    def add_adapter(self, name: str, directory: Path) -> None: ...

    def remove_adapter(self, name: str) -> None: ...


class Server(Protocol):
    activity: Activity

    @property
    def address(self) -> str: ...

    def close(self) -> None: ...


def _start_vllm(task: TaskContext, params: ServeParams, *, on_gpu: bool) -> VllmServer:
    """vLLM's server over the base model, serving the endpoint's adapters."""
    vllm = VllmServer(params, Path(params.base_model.path), task.workdir, on_gpu=on_gpu)
    try:
        vllm.wait_ready()
        _load(task, vllm, params)
    except VllmFailed as exc:
        vllm.close()
        raise TaskError(exc.message, exc.detail) from exc
    except BaseException:
        vllm.close()  # by its pid: nothing of it outlives a start that failed
        raise
    return vllm


def _load(task: TaskContext, engine: Adapters, params: ServeParams) -> None:
    for adapter in params.adapters:
        task.progress(f"loading the adapter {adapter.name}")
        try:
            engine.add_adapter(adapter.name, _fetch(task, adapter))
        except VllmFailed as exc:
            raise TaskError(exc.message, exc.detail) from exc


def follow(task: TaskContext, engine: Adapters, params: ServeParams) -> None:
    """Load the adapters `params` names that `engine` lacks, and drop those it no longer
    names. An adapter that cannot be read is left out (and logged), the others still serve."""
    wanted = {a.name: a for a in params.adapters}
    for name in set(engine.adapters) - set(wanted):
        engine.remove_adapter(name)
    for name, adapter in wanted.items():
        if name in engine.adapters:
            continue
        try:
            engine.add_adapter(name, _fetch(task, adapter))
        except (TaskError, VllmFailed) as exc:
            log.error("%s", exc.message)


def _fetch(task: TaskContext, adapter: ServedAdapter) -> Path:
    target = task.workdir / "adapters" / adapter.name.replace(":", "_")
    try:
        return download_adapter(task.store, adapter.weights, target)
    except SourceUnavailable as exc:
        raise TaskError(f"the adapter {adapter.name} could not be read: {exc}") from exc


def _device(on_gpu: bool) -> str:
    return "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
