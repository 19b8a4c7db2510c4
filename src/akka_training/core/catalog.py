"""The catalog: base models a deployment admits and the envelopes each is qualified for.

An envelope is one qualified shape of run: a method on an engine with a GPU count, a precision,
and the memory it needs per GPU and per node. A run is admitted only inside an envelope.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from akka_training.core.plans import METHODS, RL_METHODS, PlanModel, Precision

Engine = Literal["trl", "verl"]
Modality = Literal["text", "image-text"]
ENGINES: tuple[str, ...] = ("trl", "verl")


class Envelope(PlanModel):
    method: Literal["sft", "dpo", "grpo", "gspo"]
    engine: Engine
    gpus: int = Field(ge=1)
    precision: Precision = "BF16"
    gpu_memory_gib: float = Field(0, ge=0)
    host_memory_gib: float = Field(0, ge=0)


class CatalogModel(PlanModel):
    id: str
    path: str
    revision: str | None = None
    # The model's public name where users' tools resolve it (a Hugging Face Hub repository such
    # as ``Qwen/Qwen3-0.6B``) and the commit of it that `path` holds. A downloaded adapter names
    # its base model by `hub_id`, else by `id`: never by `path`, a directory on the trainer's disk.
    hub_id: str | None = None
    hub_revision: str | None = None
    modality: Modality = "text"
    context_length: int = Field(2048, ge=16)
    status: Literal["available", "disabled"] = "available"
    envelopes: list[Envelope] = Field(default_factory=list)
    # How an endpoint serves it on vLLM: adapters held on the device at once, and the largest
    # LoRA rank it takes (one of vLLM's: 1, 8, 16, 32, 64, 128, 256, 320, 512).
    max_loras: int = Field(4, ge=1, le=256)
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] = 64

    @property
    def public_name(self) -> str:
        """How a downloaded adapter names its base model (`base_model_name_or_path`)."""
        return self.hub_id or self.id

    def methods(self, engine: str, image_text_rl: bool) -> list[str]:
        """Methods this model admits under `engine`, in sft, dpo, grpo, gspo order.

        SFT and DPO always run on TRL, whatever the reinforcement engine. RL over an image-text model
        under verl needs the deployment to enable it (`trainer.reinforcement.image-text`)."""
        out = []
        for method in METHODS:
            method_engine = engine_for(method, engine)
            if not any(e.method == method and e.engine == method_engine for e in self.envelopes):
                continue
            if (
                method in RL_METHODS
                and method_engine == "verl"
                and self.modality == "image-text"
                and not image_text_rl
            ):
                continue
            out.append(method)
        return out

    def admitted(self, engine: str, image_text_rl: bool) -> list[Envelope]:
        """The envelopes a run can use on a deployment whose reinforcement engine is `engine`."""
        methods = set(self.methods(engine, image_text_rl))
        return [
            e
            for e in self.envelopes
            if e.method in methods and e.engine == engine_for(e.method, engine)
        ]

    def qualified_gpus(self, method: str, engine: str, image_text_rl: bool) -> list[int]:
        return sorted({e.gpus for e in self.admitted(engine, image_text_rl) if e.method == method})

    def envelope(self, method: str, engine: str, gpus: int, image_text_rl: bool) -> Envelope | None:
        for e in self.admitted(engine, image_text_rl):
            if e.method == method and e.gpus == gpus:
                return e
        return None


def engine_for(method: str, rl_engine: str) -> str:
    """The engine a method trains on: SFT and DPO on TRL, reinforcement on the deployment's
    engine."""
    return rl_engine if method in RL_METHODS else "trl"


def join_counts(counts: list[int]) -> str:
    """``[1]`` -> ``1``; ``[1, 4]`` -> ``1 or 4``; ``[1, 2, 4]`` -> ``1, 2 or 4``."""
    words = [str(c) for c in counts]
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]
