"""The preference share of an evaluation (`core.evaluations.PreferenceMetric`): for every pair
of a preference dataset, the log-probabilities of the chosen and the rejected answer under the
evaluated model and under its reference, tokenised as TRL's DPO tokenises them; a pair counts 1
when the model's margin against the reference is above 0, 1/2 at 0, 0 below. The reference is
the base model (the adapter disabled) or a second adapter loaded beside the evaluated one (a
dpo run's own reference, such as the SFT adapter it started from).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from akka_training.engines.data import Message

# The name a reference adapter is loaded under, beside the evaluated adapter.
REFERENCE_ADAPTER = "reference"


def pair_samples(
    tokenizer: Any,
    model: Any,
    examples: list[dict[str, Any]],
    name: str,
    reference_adapter: str | None = None,
) -> list[dict[str, Any]]:
    """One scored sample per pair, in the dataset's order, its value under `name`. The
    reference is the adapter `reference_adapter` of `model`, or with None the base model."""
    samples = []
    for index, example in enumerate(examples):
        prompt, chosen, rejected = _split(example)
        policy = (
            _logp(tokenizer, model, prompt, chosen),
            _logp(tokenizer, model, prompt, rejected),
        )
        with _reference(model, reference_adapter):
            base = (
                _logp(tokenizer, model, prompt, chosen),
                _logp(tokenizer, model, prompt, rejected),
            )
        margin = (policy[0] - base[0]) - (policy[1] - base[1])
        value = 1.0 if margin > 0 else 0.5 if margin == 0 else 0.0
        samples.append(
            {
                "index": index,
                "sample": 0,
                "prompt": _text(prompt),
                "completion": _text(chosen),
                "rejected": _text(rejected),
                "expected": None,
                "completionTokens": 0,
                "finishReason": "stop",
                "score": value,
                "values": {name: value},
                "failures": {},
                "explanations": {},
                "loss": None,
                "margin": margin,
                "logps": {"chosen": policy[0], "rejected": policy[1]},
            }
        )
    return samples


def _reference(model: Any, adapter: str | None) -> contextlib.AbstractContextManager[Any]:
    """The reference: the named adapter, or the base model (the adapter disabled; the model
    itself when it has none)."""
    if adapter is not None:
        return _using(model, adapter)
    disable = getattr(model, "disable_adapter", None)
    return disable() if callable(disable) else contextlib.nullcontext()


@contextlib.contextmanager
def _using(model: Any, adapter: str) -> Iterator[None]:
    active = model.active_adapter
    model.set_adapter(adapter)
    try:
        yield
    finally:
        model.set_adapter(active)


def _split(example: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(prompt, chosen, rejected); an implicit prompt is what both answers begin with."""
    chosen, rejected = example["chosen"], example["rejected"]
    if "prompt" in example:
        return example["prompt"], chosen, rejected
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    return chosen[:shared], chosen[shared:], rejected[shared:]


def _ids(tokenizer: Any, prompt: Any, answer: Any) -> tuple[list[int], list[int]]:
    """Token ids of the prompt alone and of prompt + answer, as TRL's DPO renders them."""
    if isinstance(prompt, str):
        return (
            tokenizer(prompt)["input_ids"],
            tokenizer(prompt + answer + tokenizer.eos_token)["input_ids"],
        )
    return _chat(tokenizer, prompt, True), _chat(tokenizer, [*prompt, *answer], False)


def _chat(tokenizer: Any, messages: list[Message], generation: bool) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation, tokenize=True
    )
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    return list(encoded)


def _logp(tokenizer: Any, model: Any, prompt: Any, answer: Any) -> float:
    """The summed log-probability of the answer's tokens after the prompt."""
    prompt_ids, ids = _ids(tokenizer, prompt, answer)
    start = next(
        (i for i, (a, b) in enumerate(zip(prompt_ids, ids, strict=False)) if a != b),
        min(len(prompt_ids), len(ids)),
    )
    tensor = torch.tensor([ids], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=tensor).logits[0, :-1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(1, tensor[0, 1:, None])
    return float(picked[max(start, 1) - 1 :].sum())


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "\n".join(str(m.get("content", "")) for m in value if isinstance(m, dict))
