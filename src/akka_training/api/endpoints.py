"""Endpoints: a base model and some of a project's adapters served over the OpenAI API
(`core.serving`), as users create and follow them."""

from __future__ import annotations

from pydantic import Field

from akka_training.api.base import RequestBody, ResponseBody, Timestamp


class EndpointCreate(RequestBody):
    project: str
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    base_model: str
    adapters: list[str] = Field(
        default_factory=list, description="RUN (its final adapter), RUN:SNAPSHOT or a modelName."
    )
    gpus: int = Field(1, ge=1, description="Devices the endpoint claims from its pool.")
    pool: str | None = None
    idle_minutes: float | None = Field(
        None,
        ge=0,
        description="Minutes without a request before it gives its devices back (0: never); "
        "default trainer.endpoints.idle-minutes.",
    )


class EndpointAdapterRef(RequestBody):
    adapter: str = Field(description="RUN (its final adapter), RUN:SNAPSHOT or a modelName.")


class EndpointAdapter(ResponseBody):
    name: str = Field(description="What a request's model names: the run, or RUN:SNAPSHOT.")
    run: str
    snapshot: str | None
    aliases: list[str] = Field(description="Other names for it: the run's modelName, RUN:step-N.")


class EndpointRecord(ResponseBody):
    id: str = Field(description="The endpoint's task.")
    project: str
    name: str
    phase: str = Field(description="QUEUED, STARTING, READY, IDLE, STOPPED or FAILED.")
    base_model: str
    adapters: list[EndpointAdapter]
    gpus: int
    pool: str
    idle_minutes: float = Field(description="0: it never goes idle.")
    engine: str | None = Field(
        None,
        description="What serves it: vllm or transformers (trainer.endpoints.engine), as its "
        "job said once it started; null before.",
    )
    failure: str | None
    created_at: Timestamp
    started_at: Timestamp | None
    ended_at: Timestamp | None


class ServedModel(ResponseBody):
    """A model the caller's live endpoints serve (`/openai/v1/models`, OpenAI's model object):
    a base model, a run, ``RUN:SNAPSHOT`` or a modelName, and the project that serves it."""

    id: str
    object: str = "model"
    created: int
    owned_by: str = Field(description="The project whose endpoint serves the model.")


class ChatPiece(ResponseBody):
    """A piece of a streamed answer (`TrainerClient.chat_stream`)."""

    text: str


class Sampled(ResponseBody):
    """One prompt's completions (`TrainerClient.sample`) and the tokens they took."""

    outputs: list[str]
    prompt_tokens: int
    completion_tokens: int
