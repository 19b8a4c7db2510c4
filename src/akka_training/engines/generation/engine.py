"""The generation engine on transformers and PEFT: a base model loaded once, LoRA adapters
added and removed by name while it runs, and one batched decoding loop for requests that each
name their adapter.

A batch mixes adapters: PEFT's mixed-adapter forward (``adapter_names``, one name per row,
`BASE` for the base model) runs every row through its own adapter in one pass. Prompts are
padded on the left with position ids counted from each row's first real token, so a row's
tokens are those it would get alone; a finished row is fed padding until the batch ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from akka_training.engines.generation.schema import (
    BASE,
    Completion,
    Delta,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    TokenLogprob,
    TopLogprob,
)

OnDelta = Callable[[Delta], None]


class AdapterNotLoaded(KeyError):
    """A request named an adapter the engine does not hold."""


class GenerationEngine:
    """A base model and the adapters held on it. `generate` is safe to call from several
    threads (one batch runs at a time); adding or removing an adapter waits for the batch."""

    def __init__(
        self,
        base: Path,
        device: str = "cpu",
        dtype: torch.dtype | None = None,
        model: torch.nn.Module | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> None:
        """`model`: the base model, already loaded on `device` (a job that holds it shares its
        weights rather than loading them twice); without it, the model is loaded from `base`.
        `tokenizer`: the one prompts were encoded with and completions are decoded with (a
        run's own, saved with its adapter); without it, the base model's."""
        self.base_path = base
        self.device = torch.device(device)
        self.tokenizer: PreTrainedTokenizerBase = tokenizer or AutoTokenizer.from_pretrained(
            str(base)
        )
        self._base: torch.nn.Module = model or AutoModelForCausalLM.from_pretrained(
            str(base), dtype=dtype or torch.float32, device_map=str(self.device)
        )
        self._base.eval()
        self._model: torch.nn.Module = self._base
        self._adapters: dict[str, Path] = {}
        self._lock = threading.Lock()
        self.eos_ids = _eos_ids(self._base, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else sorted(self.eos_ids)[0])
        self.context_length = int(getattr(self._base.config, "max_position_embeddings", 2048))

    # -- adapters --------------------------------------------------------------------------

    @property
    def adapters(self) -> dict[str, Path]:
        """The adapters held, by name, with the directory each was loaded from."""
        return dict(self._adapters)

    def add_adapter(self, name: str, directory: Path) -> None:
        """Load the PEFT adapter saved in `directory` under `name` (replacing one of that
        name)."""
        if name == BASE:
            raise ValueError(f"{BASE!r} names the base model, not an adapter")
        with self._lock:
            if name in self._adapters:
                self._remove(name)
            if isinstance(self._model, PeftModel):
                self._model.load_adapter(str(directory), adapter_name=name)
            else:
                self._model = PeftModel.from_pretrained(
                    self._base, str(directory), adapter_name=name
                )
            self._model.eval()
            self._adapters[name] = directory

    def remove_adapter(self, name: str) -> None:
        """Drop the adapter `name`; requests naming it fail from now on."""
        with self._lock:
            if name not in self._adapters:
                raise AdapterNotLoaded(name)
            self._remove(name)

    def _remove(self, name: str) -> None:
        del self._adapters[name]
        assert isinstance(self._model, PeftModel)
        if not self._adapters:
            # PEFT keeps no model without an adapter: unwrap the base, as it was loaded.
            self._base = self._model.unload()
            self._model = self._base
            return
        self._model.delete_adapter(name)

    # -- prompts ---------------------------------------------------------------------------

    def chat_prompt(self, messages: Sequence[dict[str, Any]]) -> tuple[int, ...]:
        """The token ids of `messages` under the base model's chat template, ending with the
        assistant's turn opened."""
        ids = self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return tuple(int(i) for i in _flat(ids))

    def text_prompt(self, text: str) -> tuple[int, ...]:
        return tuple(int(i) for i in self.tokenizer(text)["input_ids"])

    # -- generation ------------------------------------------------------------------------

    def generate(
        self, requests: Sequence[GenerationRequest], on_delta: OnDelta | None = None
    ) -> list[GenerationResult]:
        """Answer `requests` in one batch (each of a request's `n` completions is a row);
        `on_delta` hears each completion's new text as it is generated."""
        with self._lock:
            for request in requests:
                if request.adapter != BASE and request.adapter not in self._adapters:
                    raise AdapterNotLoaded(request.adapter)
            rows = [
                _Row(r, request, index, _generator(request, index, self.device))
                for r, request in enumerate(requests)
                for index in range(request.sampling.n)
            ]
            if rows:
                with torch.inference_mode():
                    self._decode(rows, on_delta)
        return [
            GenerationResult(
                completions=tuple(row.completion() for row in rows if row.request_index == r),
                prompt_tokens=len(request.prompt_ids),
            )
            for r, request in enumerate(requests)
        ]

    def prompt_logprobs(self, prompt_ids: Sequence[int], adapter: str = BASE) -> list[float]:
        """The log probability of each prompt token after the ones before it, under `adapter`
        (`BASE`: the base model): one value a token from the second on."""
        with self._lock:
            if adapter != BASE and adapter not in self._adapters:
                raise AdapterNotLoaded(adapter)
            if len(prompt_ids) < 2:
                return []
            ids = torch.tensor([list(prompt_ids)], device=self.device)
            extra: dict[str, Any] = {}
            if isinstance(self._model, PeftModel):
                extra["adapter_names"] = [adapter]
            with torch.inference_mode():
                logits = self._model(input_ids=ids, **extra).logits[0, :-1].float()
                logprobs = torch.log_softmax(logits, dim=-1)
                picked = logprobs.gather(-1, ids[0, 1:, None])[:, 0]
            return [float(v) for v in picked.tolist()]

    def _decode(self, rows: list[_Row], on_delta: OnDelta | None) -> None:
        longest = max(len(row.request.prompt_ids) for row in rows)
        steps = max(row.request.sampling.max_tokens for row in rows)
        steps = max(1, min(steps, self.context_length - longest))
        input_ids = torch.tensor(
            [
                [self.pad_id] * (longest - len(r.request.prompt_ids)) + list(r.request.prompt_ids)
                for r in rows
            ],
            device=self.device,
        )
        mask = (
            torch.arange(longest, device=self.device)[None, :]
            >= torch.tensor(
                [longest - len(r.request.prompt_ids) for r in rows], device=self.device
            )[:, None]
        ).long()
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        extra: dict[str, Any] = {}
        if isinstance(self._model, PeftModel):
            extra["adapter_names"] = [row.request.adapter for row in rows]
        cache: Any = None
        for _ in range(steps):
            out = self._model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                cache=cache,
                use_cache=True,
                logits_to_keep=1,  # the next token's logits only, not the whole prompt's
                **extra,
            )
            cache = out.cache
            logits = out.logits[:, -1, :].float()
            chosen = []
            for i, row in enumerate(rows):
                if row.finished is not None:
                    chosen.append(self.pad_id)
                    continue
                token = row.step(logits[i], self)
                chosen.append(token)
                if on_delta is not None:
                    delta = row.delta()
                    if delta is not None:
                        on_delta(delta)
            if all(row.finished is not None for row in rows):
                break
            input_ids = torch.tensor(chosen, device=self.device)[:, None]
            mask = torch.cat([mask, torch.ones_like(input_ids)], dim=-1)
            positions = positions[:, -1:] + 1
        for row in rows:
            if row.finished is None:
                row.finish("length")
                if on_delta is not None:
                    delta = row.delta()
                    if delta is not None:
                        on_delta(delta)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))


@dataclass
class _Row:
    """One completion being generated: its tokens so far, its text, and where it stands."""

    request_index: int
    request: GenerationRequest
    index: int
    generator: torch.Generator | None
    ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    text: str = ""
    sent: int = 0
    finished: FinishReason | None = None
    announced: bool = False

    def step(self, logits: torch.Tensor, engine: GenerationEngine) -> int:
        sampling = self.request.sampling
        token = _choose(logits, sampling.temperature, sampling.top_p, self.generator)
        if token in engine.eos_ids:
            self.finish("stop")
            return token
        self.ids.append(token)
        if sampling.logprobs or sampling.top_logprobs:
            self.logprobs.append(_logprob(logits, token, sampling.top_logprobs, engine))
        self.text = engine.decode(self.ids)
        cut = _first_stop(self.text, sampling.stop)
        if cut is not None:
            self.text = self.text[:cut]
            self.finish("stop")
        elif len(self.ids) >= sampling.max_tokens:
            self.finish("length")
        return token

    def finish(self, reason: FinishReason) -> None:
        self.finished = reason

    def delta(self) -> Delta | None:
        """The text not yet handed out: while running, all but what could still become a stop
        string (or a character still being decoded)."""
        if self.finished is None:
            hold = max((len(s) - 1 for s in self.request.sampling.stop), default=0)
            end = len(self.text) - hold
            if self.text.endswith("\ufffd"):
                end = min(end, len(self.text) - 1)
            if end <= self.sent:
                return None
            piece, self.sent = self.text[self.sent : end], end
            return Delta(self.request_index, self.index, piece)
        if self.announced:
            return None
        self.announced = True
        piece, self.sent = self.text[self.sent :], len(self.text)
        return Delta(self.request_index, self.index, piece, self.finished)

    def completion(self) -> Completion:
        wanted = self.request.sampling.logprobs or self.request.sampling.top_logprobs > 0
        return Completion(
            index=self.index,
            text=self.text,
            token_ids=tuple(self.ids),
            finish_reason=self.finished or "length",
            logprobs=tuple(self.logprobs) if wanted else None,
        )


def _choose(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> int:
    if temperature == 0:
        return int(torch.argmax(logits).item())
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1:
        ordered, order = torch.sort(probs, descending=True)
        before = ordered.cumsum(-1) - ordered
        ordered[before >= top_p] = 0
        probs = torch.zeros_like(probs).scatter(-1, order, ordered)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def _logprob(logits: torch.Tensor, token: int, top: int, engine: GenerationEngine) -> TokenLogprob:
    logprobs = torch.log_softmax(logits, dim=-1)
    alternatives: tuple[TopLogprob, ...] = ()
    if top:
        values, ids = torch.topk(logprobs, min(top, logprobs.shape[-1]))
        alternatives = tuple(
            TopLogprob(int(i), engine.decode([int(i)]), float(v))
            for v, i in zip(values.tolist(), ids.tolist(), strict=True)
        )
    return TokenLogprob(token, engine.decode([token]), float(logprobs[token]), alternatives)


def _first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    found = [text.find(s) for s in stops if s]
    hits = [i for i in found if i >= 0]
    return min(hits) if hits else None


def _generator(
    request: GenerationRequest, index: int, device: torch.device
) -> torch.Generator | None:
    if request.sampling.seed is None or request.sampling.temperature == 0:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(request.sampling.seed + index)
    return generator


def _eos_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    ids: set[int] = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (configured, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def _flat(ids: Any) -> list[int]:
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    if ids and isinstance(ids[0], list):
        return list(ids[0])
    return list(ids)
