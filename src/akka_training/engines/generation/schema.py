"""What the generation engine takes and gives: plain frozen dataclasses, no training stack."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# The adapter name a request gives to be answered by the base model alone.
BASE = "__base__"

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. `temperature` 0 is greedy (argmax, `top_p` and `seed` unused).
    `seed` makes sampling repeatable: completion i of a request samples from its own generator
    seeded with ``seed + i``. Generation stops at the model's end-of-sequence token, at the
    first of `stop` (left out of the text) or after `max_tokens`. `logprobs` asks for each
    generated token's log probability under the model (before temperature and `top_p`), and
    `top_logprobs` for that many most likely alternatives at each position."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    logprobs: bool = False
    top_logprobs: int = 0

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, not {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be 0 or more, not {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be above 0 and at most 1, not {self.top_p}")
        if self.n < 1:
            raise ValueError(f"n must be at least 1, not {self.n}")
        if self.top_logprobs < 0:
            raise ValueError(f"top_logprobs must be 0 or more, not {self.top_logprobs}")


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt, as token ids, answered by the adapter named `adapter` (`BASE`: none)."""

    prompt_ids: tuple[int, ...]
    adapter: str = BASE
    sampling: SamplingParams = field(default_factory=SamplingParams)


@dataclass(frozen=True)
class TopLogprob:
    token_id: int
    text: str
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    text: str
    logprob: float
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class Completion:
    """One of a request's `n` completions: its text (cut before a stop string), the token ids
    generated (the end-of-sequence token left out), why it ended, and the log probabilities
    when asked for (one per token id)."""

    index: int
    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True)
class GenerationResult:
    """A request's answer: its completions and the token counts a bill is made of."""

    completions: tuple[Completion, ...]
    prompt_tokens: int

    @property
    def completion_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.completions)


@dataclass(frozen=True)
class Delta:
    """Text that one completion of a request added, as it is generated (for streaming): the
    request's position in the batch, the completion's index, the new text, and the finish
    reason on its last delta."""

    request: int
    index: int
    text: str
    finish_reason: FinishReason | None = None
