"""The resolved plan: what a run trains under, with every default filled and every reference
pinned. `runs start --dry-run --show-resolved` prints it, `runs get` shows it, and the job
receives it unchanged inside its `JobSpec`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from akka_training.core.catalog import Modality
from akka_training.core.plans import Execution, PlanModel, RunConfig
from akka_training.core.reports import REPORT_SECONDS
from akka_training.core.storage import S3Options


class DatasetPin(PlanModel):
    ref: str  # as the plan wrote it
    name: str  # PROJECT/NAME
    version: int
    sha256: str
    rows: int
    bytes: int
    format: Literal["chat", "prompt-completion", "preference"]
    has_images: bool
    blob: str  # key in the blob store


class BaseModelPin(PlanModel):
    id: str
    path: str
    revision: str | None
    modality: Modality
    context_length: int


class SourcePin(PlanModel):
    """The adapter (and for a continuation the training state) a run starts from."""

    kind: Literal["warm-start", "branch", "continue"]
    run: str
    snapshot: str | None
    step: int
    weights: str  # blob key of the PEFT adapter directory
    training_state: str | None = None  # blob key, only for a continuation
    lora_rank: int | None = None
    lora_alpha: float | None = None


class ReferencePin(PlanModel):
    """What a dpo run measures its policy against (docs/preference-fine-tuning.md): the base
    model (``base-model``: the adapter disabled), or the stored adapter the run first started
    from (``adapter``: a warm start's or a branch's source). A continuation keeps the reference
    of the run it continues, not the snapshot's adapter."""

    kind: Literal["base-model", "adapter"]
    run: str | None = None  # the run whose adapter it is
    snapshot: str | None = None  # that run's snapshot, or None for its final adapter
    weights: str | None = None  # blob key of the PEFT adapter directory

    def describe(self) -> str:
        """In words: ``the base model``, ``run RUN`` or ``run RUN snapshot NAME``."""
        if self.kind == "base-model":
            return "the base model"
        return f"run {self.run}" + (f" snapshot {self.snapshot}" if self.snapshot else "")


BASE_REFERENCE = ReferencePin(kind="base-model")


def dpo_reference(source: SourcePin | None, source_settings: dict[str, Any]) -> ReferencePin:
    """A new dpo run's reference: the base model for a fresh adapter, the source's adapter for
    a warm start or a branch, and for a continuation the reference its source run recorded
    (`source_settings`, the source run's resolved settings)."""
    if source is None:
        return BASE_REFERENCE
    if source.kind != "continue":
        return ReferencePin(
            kind="adapter", run=source.run, snapshot=source.snapshot, weights=source.weights
        )
    return recorded_reference(source_settings)


def recorded_reference(settings: dict[str, Any]) -> ReferencePin:
    """The reference a dpo run's resolved settings (as stored, JSON) record. Runs resolved
    before the reference was recorded follow it from their source (none of them continued a
    training state)."""
    recorded = settings.get("reference")
    if isinstance(recorded, dict):
        return ReferencePin.model_validate(recorded)
    source = settings.get("source")
    if not isinstance(source, dict):
        return BASE_REFERENCE
    return dpo_reference(SourcePin.model_validate(source), {})


class BundlePin(PlanModel):
    """A scoring bundle a run's rule terms or tools load, pinned by hash."""

    name: str  # PROJECT/NAME
    version: int
    sha256: str
    blob: str


class Settings(PlanModel):
    project: str
    method: Literal["sft", "dpo", "grpo", "gspo"]
    engine: Literal["trl", "verl"]
    base_model: BaseModelPin
    dataset: DatasetPin
    eval_dataset: DatasetPin | None = None
    source: SourcePin | None = None
    # A dpo run's reference policy (None for the other methods).
    reference: ReferencePin | None = None
    # Bundles by the pinned reference the config's terms and tools carry (PROJECT/NAME@sha256:…).
    bundles: dict[str, BundlePin] = Field(default_factory=dict)
    config: RunConfig
    execution: Execution


class ResumePoint(PlanModel):
    """The snapshot a new attempt of the same run restarts from."""

    snapshot: str
    step: int
    weights: str
    training_state: str


class Generation(PlanModel):
    """How a TRL reinforcement job generates its rollouts (the deployment's
    ``trainer.reinforcement`` settings): ``vllm`` through TRL's vLLM colocate mode, ``hf``
    through transformers' ``generate``, ``auto`` vLLM where the job has a GPU and vLLM."""

    engine: Literal["auto", "hf", "vllm"] = "auto"
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=0.95)
    vllm_sleep_mode: bool = True


class Telemetry(PlanModel):
    collector_endpoint: str | None = None
    traceparent: str | None = None
    stall_seconds: float = 600.0
    # How often at most the job sends its reports (trainer.controller.report-seconds).
    report_seconds: float = Field(REPORT_SECONDS, ge=0, le=60)
    # An MLflow tracking server the job records the run in (trainer.tracking.mlflow-uri).
    mlflow_uri: str | None = None


# The environment variable that holds a training job's one-time bootstrap credential, which it
# exchanges for its token at its start (``POST /v1/jobs/bootstrap``).
BOOTSTRAP_ENV = "AKKA_JOB_BOOTSTRAP"


class JobSpec(PlanModel):
    """Everything a training job is started with, written to `job.json` beside it. The job's
    credentials never reach this file: its environment holds a one-time bootstrap credential
    (``AKKA_JOB_BOOTSTRAP``, `BOOTSTRAP_ENV`) that it exchanges for them at its start."""

    run_id: str
    attempt: int
    project: str
    model_name: str | None = None
    pipeline: str | None = None
    stage: str | None = None
    trainer_url: str
    storage_url: str
    # How to reach an S3 store (the credentials travel in the job's environment).
    storage_s3: S3Options = Field(default_factory=S3Options)
    settings: Settings
    resume: ResumePoint | None = None
    telemetry: Telemetry = Field(default_factory=Telemetry)
    generation: Generation = Field(default_factory=Generation)
    # Steps to train in total (known after tokenising only for sft; None until then).
    max_steps: int | None = None
