"""Endpoints: a base model and some of a project's adapters served over the OpenAI API by a
long-lived job on the cluster.

An endpoint is a task of kind `SERVE` (`core.tasks`): the controller launches it like any task,
once its claim on the pool's devices is granted, and it runs until it is deleted. Its job loads
the base model and the adapters (`ServeParams`) into the one generation engine, serves the
OpenAI API on its own host, and tells the service where (`TaskProgressReport.address`); the
service's front door (``/openai/v1``) forwards a project's requests to it.

Its phase is read off the task: QUEUED while its claim waits, STARTING until its job reported
an address, READY while it serves, IDLE once its job ended after `idle_minutes` without a
request (its task SUCCEEDED with ``{"idle": true}``, its devices given back: the next request
starts a new task of the same key), STOPPED once deleted, FAILED when its job failed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from akka_training.core.plans import PlanModel
from akka_training.core.resolved import BaseModelPin

SERVE = "serve"
# The header in which the front door names the adapter (or the base model) a request's `model`
# resolved to, when it forwards the request to the endpoint's job.
ADAPTER_HEADER = "X-Akka-Adapter"
# The key an endpoint's job reports with its address: it answers only requests carrying it.
KEY_HEADER = "X-Endpoint-Key"


ServingEngine = Literal["auto", "vllm", "transformers"]
# The engines that serve (what `auto` becomes).
VLLM = "vllm"
TRANSFORMERS = "transformers"


class EndpointPhase(StrEnum):
    QUEUED = "QUEUED"
    STARTING = "STARTING"
    READY = "READY"
    IDLE = "IDLE"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class ServedAdapter(PlanModel):
    """An adapter an endpoint holds: `name` is what a request's `model` resolves to (the run id,
    or ``RUN:SNAPSHOT``), `weights` the blob prefix of its PEFT directory."""

    name: str
    run: str
    snapshot: str | None = None
    weights: str
    # What else names it in a request: the run's modelName, ``RUN:step-N``.
    aliases: list[str] = Field(default_factory=list)


class ServeParams(PlanModel):
    endpoint: str
    base_model: BaseModelPin
    adapters: list[ServedAdapter] = Field(default_factory=list)
    # Devices it claims; minutes without a request before its job ends and gives them back (0:
    # never); the next request starts it again.
    gpus: int = 1
    idle_minutes: float = 0.0
    # How often the job tells the service it still serves (seconds).
    heartbeat_seconds: float = 2.0
    # What serves it (`trainer.endpoints.engine`), the interpreter of vLLM's environment
    # (`trainer.endpoints.vllm-python`), and vLLM's LoRA limits from the catalog entry.
    engine: ServingEngine = "auto"
    vllm_python: str | None = None
    max_loras: int = 4
    max_lora_rank: int = 64


def endpoint_key(project: str, name: str) -> str:
    """The task key of a project's endpoint `name` (one live endpoint per name)."""
    return f"endpoint:{project}:{name}"
