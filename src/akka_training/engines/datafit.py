"""Data fit: how the dataset fits the run's ``maxSeqLength``, counted before training with the
model's own tokenizer and chat template, and the padding share of each batch during training.

The counts follow what TRL 1.16 does to the rows:

- SFT (text): each row is tokenised (chat rows with the assistant mask, prompt/completion rows
  with the completion mask), cut to ``max_length`` keeping the start, and dropped when no token
  that counts in the loss survives the cut.
- SFT (image-text): rows are tokenised and cut batch by batch in the collator; nothing is
  dropped, so a row whose answer lies wholly past the limit counts as an answer truncated.
- GRPO/GSPO: TRL does not truncate prompts, so the engine drops every prompt longer than
  ``maxSeqLength - maxCompletionTokens`` (its rollouts could not fit) and counts it here.
- DPO: TRL tokenises each pair (prompt, prompt + chosen, prompt + rejected, through the chat
  template for messages) and drops a pair whose prompt alone fills ``max_length``; the engine
  then keeps the last ``maxPromptLength`` tokens of a longer prompt, and TRL's collator cuts
  prompt + answer at ``max_length``. `pair_fit` counts from TRL's own token ids.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# transformers is imported when a processor is looked at: the counts' callers hold one already.
if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, ProcessorMixin
    from typing_extensions import TypeIs

    ProcessingClass = PreTrainedTokenizerBase | ProcessorMixin


@dataclass
class DataFit:
    """`rows_truncated`: rows longer than the limit (dropped ones included). `answers_truncated`:
    kept rows that lost part of the tokens their loss counts (for RL: 0, prompts are never cut).
    `rows_dropped`: rows left out of training."""

    rows: int
    rows_truncated: int
    answers_truncated: int
    rows_dropped: int
    max_seq_length: int

    def to_report(self) -> dict[str, int]:
        return {
            "rows": self.rows,
            "rowsTruncated": self.rows_truncated,
            "answersTruncated": self.answers_truncated,
            "rowsDropped": self.rows_dropped,
            "maxSeqLength": self.max_seq_length,
        }


def sft_data_fit(
    examples: Sequence[dict[str, Any]], processing: ProcessingClass, max_length: int
) -> DataFit:
    """Count how SFT examples (as `data.sft_examples` shapes them) fit `max_length`."""
    vision = bool(examples) and "images" in examples[0]
    truncated = answers = dropped = 0
    for example in examples:
        ids, mask = _sft_tokens(example, processing, vision)
        if len(ids) > max_length:
            truncated += 1
        kept = any(mask[:max_length])
        if vision or kept:
            answers += int(any(mask[max_length:]))
        else:
            dropped += 1
    return DataFit(len(examples), truncated, answers, dropped, max_length)


@dataclass
class PairFit:
    """How preference pairs fit: the `DataFit` (rows are pairs; `rows_truncated`: pairs longer
    than the limit, dropped ones included; `answers_truncated`: kept pairs that lost part of
    an answer) and `prompts_truncated`, prompts cut to their share of the length."""

    fit: DataFit
    prompts_truncated: int

    def to_report(self) -> dict[str, int]:
        return self.fit.to_report() | {"promptsTruncated": self.prompts_truncated}


def pair_fit(
    pairs: int,
    lengths: Sequence[tuple[int, int, int]],
    max_length: int,
    max_prompt_length: int,
) -> PairFit:
    """Count how `pairs` preference pairs fit. `lengths`: (prompt, chosen, rejected) token
    counts of the pairs TRL kept, before the prompt is cut to `max_prompt_length`; the pairs
    missing from it were dropped."""
    dropped = pairs - len(lengths)
    prompts = truncated = answers = 0
    for prompt, chosen, rejected in lengths:
        longest = prompt + max(chosen, rejected)
        truncated += int(longest > max_length)
        if prompt > max_prompt_length:
            prompts += 1
            prompt = max_prompt_length
        answers += int(prompt + max(chosen, rejected) > max_length)
    fit = DataFit(pairs, truncated + dropped, answers, dropped, max_length)
    return PairFit(fit, prompts)


def rl_data_fit(
    prompt_lengths: Sequence[int], max_seq_length: int, max_completion_tokens: int
) -> tuple[DataFit, list[bool]]:
    """Count the prompts that leave no room for a completion; returns the fit and which
    prompts to keep."""
    room = max_seq_length - max_completion_tokens
    keep = [length <= room for length in prompt_lengths]
    dropped = keep.count(False)
    fit = DataFit(len(prompt_lengths), dropped, 0, dropped, max_seq_length)
    return fit, keep


def prompt_length(
    prompt: list[dict[str, Any]] | str,
    processing: ProcessingClass,
    tools: list[Any] | None = None,
) -> int:
    """Tokens of a reinforcement prompt as GRPO renders it (chat template with the generation
    prompt and the run's tools, or plain text)."""
    if isinstance(prompt, str):
        return len(_plain_ids(processing, prompt))
    return len(_chat(processing, prompt, add_generation_prompt=True, tools=tools)["input_ids"])


class PaddingMeter:
    """Wraps a collator and keeps, for every training batch it builds, the count of real and of
    padded token slots, so the step that consumed the batches can report its tokens and its
    padding share.

    Batches are built ahead of the step that uses them (the data loader prefetches), so they wait
    in a queue; `take(n)` removes the oldest `n`, the batches of one optimizer step. Give the
    meter to the training data loader only (evaluation batches would join the queue)."""

    def __init__(self, collator: Callable[[list[Any]], dict[str, Any]]) -> None:
        self.collator = collator
        self._batches: collections.deque[tuple[int, int]] = collections.deque()
        self._lock = threading.Lock()

    def __call__(self, examples: list[Any]) -> dict[str, Any]:
        batch = self.collator(examples)
        mask = batch.get("attention_mask")
        if mask is not None:
            with self._lock:
                self._batches.append((int(mask.sum()), int(mask.numel())))
        elif "position_ids" in batch:
            # A padding-free batch (no padding to the batch's or any multiple's length): one
            # sequence of the rows end to end, every slot a real token.
            slots = int(batch["input_ids"].numel())
            with self._lock:
                self._batches.append((slots, slots))
        return batch

    def take(self, batches: int) -> tuple[int, float | None]:
        """Real tokens of the oldest `batches` batches and their padding share."""
        real = slots = 0
        with self._lock:
            for _ in range(min(batches, len(self._batches))):
                batch_real, batch_slots = self._batches.popleft()
                real += batch_real
                slots += batch_slots
        return real, (1.0 - real / slots) if slots else None


# --- tokenisation as TRL's SFT preparation does it ----------------------------------------------


def _sft_tokens(
    example: dict[str, Any], processing: ProcessingClass, vision: bool
) -> tuple[list[int], list[int]]:
    """Token ids of an example and the mask of the tokens its loss counts."""
    images = example.get("images") or None
    if "messages" in example:
        out = _chat(
            processing, example["messages"], images=images, return_assistant_tokens_mask=True
        )
        return list(out["input_ids"]), list(out["assistant_masks"])
    prompt, completion = example["prompt"], example["completion"]
    if isinstance(prompt, list):
        prompt_ids = _chat(processing, prompt, images=images, add_generation_prompt=True)[
            "input_ids"
        ]
        full_ids = _chat(processing, prompt + completion, images=images)["input_ids"]
    else:
        eos = _tokenizer(processing).eos_token
        if not completion.endswith(eos):
            completion += eos
        prompt_ids = _plain_ids(processing, prompt)
        full_ids = _plain_ids(processing, prompt + completion)
    shared = _common_prefix(list(prompt_ids), list(full_ids))
    return list(full_ids), [0] * shared + [1] * (len(full_ids) - shared)


def _chat(
    processing: ProcessingClass,
    messages: list[dict[str, Any]],
    images: list[Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    if _is_processor(processing):
        messages = _with_images(messages, images or [])
        out: Any = processing.apply_chat_template(
            messages, tokenize=True, return_dict=True, **kwargs
        )
        return {k: v[0] for k, v in out.items()}
    # With return_dict=True the tokenizer answers a mapping (its annotation is wider).
    return dict(
        processing.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)  # type: ignore[arg-type]
    )


def _with_images(messages: list[dict[str, Any]], images: list[Any]) -> list[dict[str, Any]]:
    """Messages with content as parts, each image placeholder holding its image (what the
    processor needs to expand it), and plain-text content turned into a text part."""
    pending = list(images)
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        parts = []
        for part in content:
            if part.get("type") == "image":
                parts.append({"type": "image", "image": pending.pop(0)})
            else:
                parts.append({"type": "text", "text": part.get("text") or ""})
        out.append({**message, "content": parts})
    return out


def _plain_ids(processing: ProcessingClass, text: str) -> list[int]:
    out = processing(text=text)
    ids = out["input_ids"]
    return list(ids[0]) if _is_processor(processing) else list(ids)


def _is_processor(processing: ProcessingClass) -> TypeIs[ProcessorMixin]:
    from transformers import ProcessorMixin

    return isinstance(processing, ProcessorMixin)


def _tokenizer(processing: ProcessingClass) -> PreTrainedTokenizerBase:
    return processing.tokenizer if _is_processor(processing) else processing


def _common_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length
