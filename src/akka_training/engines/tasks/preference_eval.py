"""The preference share of an evaluation (`core.evaluations.PreferenceMetric`): for every pair
of a preference dataset, the log-probabilities of the chosen and the rejected answer under the
evaluated model and under the base model (the adapter disabled), tokenised as TRL's DPO
tokenises them; a pair counts 1 when the model's margin against the base model is above 0,
1/2 at 0, 0 below.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from akka_training.engines.data import Message


def pair_samples(
    tokenizer: Any, model: Any, examples: list[dict[str, Any]], name: str
) -> list[dict[str, Any]]:
    """One scored sample per pair, in the dataset's order, its value under `name`."""
    samples = []
    for index, example in enumerate(examples):
        prompt, chosen, rejected = _split(example)
        policy = (
            _logp(tokenizer, model, prompt, chosen),
            _logp(tokenizer, model, prompt, rejected),
        )
        with _reference(model):
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


def _reference(model: Any) -> contextlib.AbstractContextManager[Any]:
    """The base model: the adapter disabled (the model itself when it has none)."""
    disable = getattr(model, "disable_adapter", None)
    return disable() if callable(disable) else contextlib.nullcontext()


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
