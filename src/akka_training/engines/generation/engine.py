"""The generation engine on transformers and PEFT: a base model loaded once, LoRA adapters
added and removed by name while it runs, and one decoding loop for requests that each name
their adapter.

A batch mixes adapters: PEFT's mixed-adapter forward (``adapter_names``, one name per row,
`BASE` for the base model) runs every row through its own adapter in one pass. Prompts are
padded on the left with position ids counted from each row's first real token, so a row's
tokens are those it would get alone.

Batching is continuous (`serve`): requests that arrive while a batch decodes join it at the
next step. Their prompts are prefilled together, their key/value cache is padded on the left to
the batch's length and stacked under it, and they decode with the others from then on; a row
that finishes leaves the batch at once, and its caller is answered then, not when the batch
ends. A model whose cache is not transformers' plain `DynamicCache` (sliding windows, linear
attention) cannot be stacked this way: there, newcomers wait for the running batch to end.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicCache, DynamicLayer

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
# `serve`'s source of work: given the rows decoding now, the submissions that join them (0
# rows: nothing runs, so it may wait for one); None when there will be no more.
Poll = Callable[[int], "list[Submission] | None"]


class AdapterNotLoaded(KeyError):
    """A request named an adapter the engine does not hold."""


@dataclass(eq=False)
class Submission:
    """Requests handed to the engine together by one caller: `on_delta` hears their new text
    (a delta's `request` is the position in `requests`), and `done` is set once every one of
    their completions has finished, with `results` or the `error` that ended them.
    `tolerant`: a failing `on_delta` (its client went away) makes the caller deaf to further
    deltas and the others go on; otherwise its error ends the batch."""

    requests: Sequence[GenerationRequest]
    on_delta: OnDelta | None = None
    tolerant: bool = True
    done: threading.Event = field(default_factory=threading.Event)
    results: list[GenerationResult] | None = None
    error: BaseException | None = None
    deaf: bool = False
    rows: list[_Row] = field(default_factory=list)
    unfinished: int = 0

    @property
    def size(self) -> int:
        """Its rows: each request's `n` completions."""
        return sum(r.sampling.n for r in self.requests)

    def hear(self, delta: Delta) -> None:
        if self.on_delta is None or self.deaf:
            return
        if not self.tolerant:
            self.on_delta(delta)
            return
        try:
            self.on_delta(delta)
        except Exception:
            self.deaf = True

    def fail(self, error: BaseException) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()

    def row_finished(self) -> None:
        self.unfinished -= 1
        if self.unfinished == 0:
            self._answer()

    def _answer(self) -> None:
        self.results = [
            GenerationResult(
                completions=tuple(row.completion() for row in self.rows if row.request_index == r),
                prompt_tokens=len(request.prompt_ids),
            )
            for r, request in enumerate(self.requests)
        ]
        self.done.set()


class GenerationEngine:
    """A base model and the adapters held on it. `generate` is safe to call from several
    threads (one batch runs at a time); adding or removing an adapter waits for the batch. One
    thread may `serve` a continuous batch; while another waits for the engine (an adapter
    change, a direct `generate`), the batch takes no newcomers, so it ends and lets it in."""

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
        # How many callers wait for `_lock` (`_exclusive`): a serving batch admits no
        # newcomers while one does, and the serving loop lets them in before its next batch.
        self._gate = threading.Condition()
        self._waiting = 0
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
        with self._exclusive():
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
        with self._exclusive():
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
        submission = Submission(requests, on_delta, tolerant=False)
        with self._exclusive():
            self._check(submission)
            if submission.size:
                with torch.inference_mode():
                    batch = _Batch(self)
                    batch.admit([submission])
                    while batch.rows:
                        batch.step()
        if not submission.size:
            submission.unfinished = 1
            submission.row_finished()
        assert submission.results is not None
        return submission.results

    def serve(self, poll: Poll) -> None:
        """Generate continuously until `poll` says there is no more: what it hands over while
        a batch decodes joins that batch at its next step. A submission naming an adapter the
        engine does not hold fails alone; an error of the model fails every submission of the
        batch, and serving goes on."""
        while True:
            arrived = poll(0)
            if arrived is None:
                return
            with self._gate:
                while self._waiting:
                    self._gate.wait()
                self._lock.acquire()
            batch: _Batch | None = None
            try:
                with torch.inference_mode():
                    batch = _Batch(self)
                    batch.admit([s for s in arrived if self._admissible(s)])
                    while batch.rows:
                        batch.step()
                        if batch.rows and batch.joinable and not self._waiting:
                            more = poll(len(batch.rows))
                            if more:
                                batch.admit([s for s in more if self._admissible(s)])
            except BaseException as exc:  # every caller of the batch hears why
                for submission in [*arrived, *(batch.submissions if batch else [])]:
                    submission.fail(exc)
                if not isinstance(exc, Exception):
                    raise
            finally:
                self._lock.release()

    def _admissible(self, submission: Submission) -> bool:
        try:
            self._check(submission)
        except AdapterNotLoaded as exc:
            submission.fail(exc)
            return False
        if not submission.size:
            submission.unfinished = 1
            submission.row_finished()
            return False
        return True

    def _check(self, submission: Submission) -> None:
        for request in submission.requests:
            if request.adapter != BASE and request.adapter not in self._adapters:
                raise AdapterNotLoaded(request.adapter)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """The engine to itself: a serving batch stops taking newcomers and ends first."""
        with self._gate:
            self._waiting += 1
        try:
            self._lock.acquire()
        finally:
            with self._gate:
                self._waiting -= 1
                self._gate.notify_all()
        try:
            yield
        finally:
            self._lock.release()

    def prompt_logprobs(self, prompt_ids: Sequence[int], adapter: str = BASE) -> list[float]:
        """The log probability of each prompt token after the ones before it, under `adapter`
        (`BASE`: the base model): one value a token from the second on."""
        with self._exclusive():
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

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))


class _Batch:
    """The rows decoding together: their key/value cache, attention mask, last positions and
    the tokens each feeds next. Rows join after a prefill of their own and leave when they
    finish; the cache keeps one column per step, less the leading ones no row attends to."""

    def __init__(self, engine: GenerationEngine) -> None:
        self.engine = engine
        self.rows: list[_Row] = []
        self.submissions: list[Submission] = []
        self.cache: Any = None
        self.mask = torch.zeros((0, 0), dtype=torch.long, device=engine.device)
        self.positions = torch.zeros((0, 1), dtype=torch.long, device=engine.device)
        self.pending: list[int] = []
        # Newcomers may be stacked into the cache (a plain DynamicCache); otherwise the batch
        # runs as it began, finished rows fed padding until the last one ends.
        self.joinable = True

    def admit(self, submissions: list[Submission]) -> None:
        """Prefill the submissions' prompts together, pick each row's first token, and stack
        the rows under the running ones."""
        engine = self.engine
        self.submissions += submissions
        rows: list[_Row] = []
        for submission in submissions:
            submission.rows = [
                _Row(
                    submission,
                    r,
                    request,
                    index,
                    _generator(request, index, engine.device),
                    _cap(request, engine.context_length),
                )
                for r, request in enumerate(submission.requests)
                for index in range(request.sampling.n)
            ]
            submission.unfinished = len(submission.rows)
            rows += submission.rows
        if not rows:
            return
        longest = max(len(row.request.prompt_ids) for row in rows)
        ids = torch.tensor(
            [
                [engine.pad_id] * (longest - len(r.request.prompt_ids)) + list(r.request.prompt_ids)
                for r in rows
            ],
            device=engine.device,
        )
        starts = torch.tensor(
            [longest - len(r.request.prompt_ids) for r in rows], device=engine.device
        )
        mask = (torch.arange(longest, device=engine.device)[None, :] >= starts[:, None]).long()
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = engine._model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,  # the next token's logits only, not the whole prompt's
            **self._adapters(rows),
        )
        chosen = self._choose(rows, out.logits[:, -1, :].float())
        if self.cache is None:
            self.cache, self.mask, self.positions = out.cache, mask, positions[:, -1:]
            self.rows, self.pending = rows, chosen
            self.joinable = _stackable(out.cache)
        else:
            self._stack(out.cache, mask, positions[:, -1:])
            self.rows += rows
            self.pending += chosen
        self._leave()

    def step(self) -> None:
        """One decoding step of every row."""
        ids = torch.tensor(self.pending, device=self.engine.device)[:, None]
        self.mask = torch.cat([self.mask, torch.ones_like(ids)], dim=-1)
        self.positions = self.positions + 1
        out = self.engine._model(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=self.positions,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
            **self._adapters(self.rows),
        )
        self.cache = out.cache
        self.pending = self._choose(self.rows, out.logits[:, -1, :].float())
        self._leave()

    def _adapters(self, rows: list[_Row]) -> dict[str, Any]:
        if isinstance(self.engine._model, PeftModel):
            return {"adapter_names": [row.request.adapter for row in rows]}
        return {}

    def _choose(self, rows: list[_Row], logits: torch.Tensor) -> list[int]:
        """Each row's next token (padding for a finished one); a row that finishes tells its
        submission, which answers its caller when it was the last."""
        chosen = []
        for i, row in enumerate(rows):
            if row.finished is not None:
                chosen.append(self.engine.pad_id)
                continue
            chosen.append(row.step(logits[i], self.engine))
            delta = row.delta()
            if delta is not None:
                row.submission.hear(delta)
            if row.finished is not None:
                row.submission.row_finished()
        return chosen

    def _leave(self) -> None:
        """Drop the finished rows, and the leading cache columns no row attends to."""
        keep = [i for i, row in enumerate(self.rows) if row.finished is None]
        if not keep:
            self.rows, self.pending, self.cache = [], [], None
            self.submissions = []
            return
        if not self.joinable or len(keep) == len(self.rows):
            return
        index = torch.tensor(keep, device=self.engine.device)
        self.cache.batch_select_indices(index)
        self.rows = [self.rows[i] for i in keep]
        self.pending = [self.pending[i] for i in keep]
        self.mask = self.mask[index]
        self.positions = self.positions[index]
        self.submissions = [s for s in self.submissions if not s.done.is_set()]
        first = int(self.mask.any(dim=0).long().argmax().item())
        if first:
            self.mask = self.mask[:, first:]
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, first:]
                layer.values = layer.values[:, :, first:]

    def _stack(self, cache: Any, mask: torch.Tensor, positions: torch.Tensor) -> None:
        """Stack newcomers' cache under the running rows', the shorter padded on the left."""
        length = max(self.mask.shape[1], mask.shape[1])
        for layer, new in zip(self.cache.layers, cache.layers, strict=True):
            layer.keys = torch.cat([_left(layer.keys, length), _left(new.keys, length)])
            layer.values = torch.cat([_left(layer.values, length), _left(new.values, length)])
        self.mask = torch.cat([_left(self.mask, length), _left(mask, length)])
        self.positions = torch.cat([self.positions, positions])


def _left(tensor: torch.Tensor, length: int) -> torch.Tensor:
    """`tensor` padded with zeros on the left of its sequence dimension (the mask's last, a
    cache layer's third) to `length`."""
    dim = 1 if tensor.dim() == 2 else 2
    short = length - tensor.shape[dim]
    if short <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = short
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def _stackable(cache: Any) -> bool:
    return type(cache) is DynamicCache and all(
        type(layer) is DynamicLayer for layer in cache.layers
    )


def _cap(request: GenerationRequest, context_length: int) -> int:
    """The most tokens a row may generate: its max_tokens, within the model's context."""
    return max(1, min(request.sampling.max_tokens, context_length - len(request.prompt_ids)))


@dataclass
class _Row:
    """One completion being generated: its tokens so far, its text, and where it stands."""

    submission: Submission
    request_index: int
    request: GenerationRequest
    index: int
    generator: torch.Generator | None
    cap: int
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
        elif len(self.ids) >= self.cap:
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
