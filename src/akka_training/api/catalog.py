"""The catalog as users read it: base models, the methods each admits per engine, and the
envelopes (qualified run shapes) a run is admitted inside."""

from __future__ import annotations

from pydantic import Field

from akka_training.api.base import ResponseBody, optional_key


class BaseModelSummary(ResponseBody):
    id: str
    status: str = Field(description="available or disabled.")
    modality: str = Field(description="text or image-text.")
    methods: list[str] = Field(description="The methods this deployment offers for the model.")


class Envelope(ResponseBody):
    """One qualified shape of run: a method on an engine with a GPU count, a precision, and
    the memory it needs per GPU and per node."""

    method: str
    engine: str
    gpus: int
    precision: str
    gpu_memory_gib: float
    host_memory_gib: float


class BaseModelDetail(ResponseBody):
    id: str
    status: str
    path: str
    revision: str | None
    hub_id: str | None = optional_key(
        "The model's public name (a Hugging Face Hub repository) downloads name it by."
    )
    hub_revision: str | None = optional_key("The commit of hub_id that path holds.")
    context_length: int
    modality: str
    engine: str = Field(description="This deployment's reinforcement engine.")
    methods: list[str] = Field(description="The methods this deployment offers for the model.")
    methods_by_engine: dict[str, list[str]]
    admitted: list[Envelope] = Field(description="The runs this deployment admits for it.")


class CatalogEnvelope(ResponseBody):
    """An envelope of a model, and whether this deployment admits it."""

    model: str
    method: str
    engine: str
    gpus: int
    precision: str
    gpu_memory_gib: float
    host_memory_gib: float
    admitted: bool
