"""The one generation engine: a base model loaded once, several LoRA adapters held on it by
name, and batched generation for requests that each name their adapter (or the base).

Serving (the endpoint job), the sampling API and evaluations share it. The types a caller
passes and gets back live in `schema` and import no training stack; the engine
(`engine.GenerationEngine`, with transformers and PEFT) and its request queue
(`batcher.Batcher`) load it.
"""

from akka_training.engines.generation.schema import (
    BASE,
    Completion,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    TokenLogprob,
    TopLogprob,
)

__all__ = [
    "BASE",
    "Completion",
    "GenerationRequest",
    "GenerationResult",
    "SamplingParams",
    "TokenLogprob",
    "TopLogprob",
]
