"""Interactive runs: a run whose steps a client drives one request at a time (the Tinker API,
``/tinker``), rather than a plan's dataset and hyperparameters. Its job holds the base model with
a LoRA adapter and answers the service's requests on a loopback HTTP API
(`akka_training.engines.tinker`); every optimizer step it takes is a step of the run.

An interactive run is stored like any run (`runs list` shows its method, ``tinker``); its settings
are `InteractiveSettings`, and its job is started with an `InteractiveJobSpec`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from akka_training.core.plans import Execution, PlanModel
from akka_training.core.resolved import BaseModelPin, Telemetry
from akka_training.core.storage import S3Options

INTERACTIVE_METHOD = "tinker"
INTERACTIVE_ENGINE = "peft"
# The module a job of an interactive run runs (`python -m MODULE job.json`).
INTERACTIVE_JOB = "akka_training.engines.tinker.job"


class InteractiveLora(PlanModel):
    """The adapter the client asked for (`create_lora_training_client`)."""

    rank: int = Field(32, ge=1, le=1024)
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True


class InteractiveSource(PlanModel):
    """Saved weights a training client starts from (`create_training_client_from_state`):
    ``tinker://RUN/weights/NAME``, with the optimizer's state or without."""

    path: str
    optimizer: bool = False


class InteractiveSettings(PlanModel):
    project: str
    method: Literal["tinker"] = "tinker"
    engine: Literal["peft"] = "peft"
    base_model: BaseModelPin
    lora: InteractiveLora
    # The Tinker session the run belongs to.
    session: str
    source: InteractiveSource | None = None
    execution: Execution = Field(default_factory=Execution)


class InteractiveJobSpec(PlanModel):
    """What the job of an interactive run is started with (beside it as `job.json`); like a
    training job's `JobSpec`, it holds no credential."""

    run_id: str
    attempt: int
    project: str
    trainer_url: str
    storage_url: str
    storage_s3: S3Options = Field(default_factory=S3Options)
    settings: InteractiveSettings
    telemetry: Telemetry = Field(default_factory=Telemetry)
