"""Sampling in an interactive run's job, through the one generation engine
(`akka_training.engines.generation`).

The engine is made once, at the first sampler save or sample, over the base weights the training
model holds (shared, not copied: `model.LoraModel.shared_base`); every ``save_weights_for_sampler``
adds the adapter as it stands to the engine's named adapters (no base model is loaded for a
save). A sampling session's id is ``RUN:sampler:NAME``: NAME is the adapter
it samples (``engines.generation.BASE`` for the base model alone). Samples run on the engine's batcher, beside the
training queue, and their results wait here, under ``RUN:sample:N``, until the service retrieves
them; the result is the SDK's protobuf ``SampleResponse``.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tinker.proto import tinker_public_pb2 as pb

from akka_training.engines.generation.batcher import Batcher
from akka_training.engines.generation.engine import AdapterNotLoaded, GenerationEngine
from akka_training.engines.generation.schema import (
    Completion,
    GenerationRequest,
    SamplingParams,
)
from akka_training.engines.tinker.api import PROTOBUF, Result, failed
from akka_training.engines.tinker.model import discard, scratch

log = logging.getLogger("akka_training.tinker")

SAMPLER_MARK = ":sampler:"
# What a request that gives no max_tokens may generate.
DEFAULT_MAX_TOKENS = 64


class SampleError(ValueError):
    """A sample request asked for what the engine does not do; the message says what to change."""


def sampling_session_id(run_id: str, adapter: str) -> str:
    return f"{run_id}{SAMPLER_MARK}{adapter}"


def adapter_of(session_id: str) -> str:
    _, mark, adapter = session_id.partition(SAMPLER_MARK)
    if not mark or not adapter:
        raise SampleError(f"{session_id!r} is not a sampling session of this run")
    return adapter


class Sampler:
    """The generation engine of one job, its adapters, and the samples it answers."""

    def __init__(
        self, run_id: str, base: Path, device: str, model: Callable[[], torch.nn.Module]
    ) -> None:
        """`model` makes the engine's base model (sharing the training model's weights)."""
        self.run_id = run_id
        self.base = base
        self.device = device
        self._model = model
        self._engine: GenerationEngine | None = None
        self._batcher: Batcher | None = None
        self._lock = threading.Lock()
        self._results: dict[str, Result] = {}
        self._running: set[str] = set()
        self._count = itertools.count(1)
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tinker-sample")
        self._dirs: dict[str, Path] = {}

    # -- the engine and its adapters --------------------------------------------------------------

    def engine(self) -> tuple[GenerationEngine, Batcher]:
        with self._lock:
            if self._engine is None or self._batcher is None:
                self._engine = GenerationEngine(self.base, self.device, model=self._model())
                self._batcher = Batcher(self._engine)
            return self._engine, self._batcher

    def add(self, name: str, weights: Path) -> None:
        """Hold the adapter saved in `weights` under `name` (replacing one of that name); the
        directory is the sampler's from now on."""
        engine, _ = self.engine()
        engine.add_adapter(name, weights)
        with self._lock:
            old = self._dirs.pop(name, None)
            self._dirs[name] = weights
        if old is not None and old != weights:
            discard(old)

    def adapter_dir(self) -> Path:
        """A new directory to save an adapter in."""
        return scratch()

    # -- samples ----------------------------------------------------------------------------------

    def submit(self, body: dict[str, Any]) -> tuple[str, list[str]]:
        """Start a sample; its request id and one sequence id a sample."""
        request_id = f"{self.run_id}:sample:{next(self._count)}"
        samples = max(1, int(body.get("num_samples") or 1))
        with self._lock:
            self._running.add(request_id)
        self._pool.submit(self._run, request_id, body)
        return request_id, [f"{request_id}:{i}" for i in range(samples)]

    def known(self, request_id: str) -> bool:
        with self._lock:
            return request_id in self._running or request_id in self._results

    def result(self, request_id: str) -> Result | None:
        with self._lock:
            return self._results.get(request_id)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._batcher is not None:
            self._batcher.close()
        for directory in self._dirs.values():
            discard(directory)

    def _run(self, request_id: str, body: dict[str, Any]) -> None:
        try:
            result = Result(PROTOBUF, self.sample(body))
        except AdapterNotLoaded as exc:
            result = failed(
                f"the sampler weights {exc.args[0]!r} are not held by run {self.run_id}'s job; "
                "save them with save_weights_for_sampler first"
            )
        except (SampleError, ValueError, TypeError) as exc:
            result = failed(f"sample: {exc}")
        except Exception as exc:  # the sample fails, the job goes on
            log.exception("sample %s failed", request_id)
            result = failed(f"sample failed: {exc}", "server")
        with self._lock:
            self._running.discard(request_id)
            self._results[request_id] = result

    def sample(self, body: dict[str, Any]) -> bytes:
        """The SDK's ``SampleResponse`` for a ``SampleRequest`` body."""
        adapter = adapter_of(str(body.get("sampling_session_id") or ""))
        for name in ("topk_prompt_logprobs", "prompt_alt_tokens_k"):
            if int(body.get(name) or 0) > 0:
                raise SampleError(f"{name} is not supported here; leave it at 0")
        if body.get("target_prompt_logprobs") is not None:
            raise SampleError("target_prompt_logprobs is not supported here; leave it out")
        prompt = prompt_tokens(body.get("prompt") or {})
        engine, batcher = self.engine()
        top = int(body.get("topk_sample_logprobs") or 0)
        sampling = sampling_params(
            body.get("sampling_params") or {}, int(body.get("num_samples") or 1), top, engine
        )
        [result] = batcher.submit([GenerationRequest(tuple(prompt), adapter, sampling)])
        msg = pb.SampleResponse()
        for completion in result.completions:
            _sequence(msg.sequences.add(), completion, top)
        if body.get("prompt_logprobs"):
            scored = [math.nan, *engine.prompt_logprobs(prompt, adapter)]
            last = body.get("prompt_logprobs_last_n")
            if last is not None:
                keep = len(scored) - int(last)
                scored = [math.nan] * keep + scored[keep:]
            msg.prompt_logprobs = np.asarray(scored, dtype=np.float32).tobytes()
        written: bytes = msg.SerializeToString()
        return written


def prompt_tokens(prompt: dict[str, Any]) -> list[int]:
    tokens: list[int] = []
    for chunk in prompt.get("chunks") or []:
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise SampleError("only token chunks (EncodedTextChunk) are supported as a prompt")
        tokens.extend(int(t) for t in chunk.get("tokens") or [])
    if not tokens:
        raise SampleError("the prompt has no tokens")
    return tokens


def sampling_params(
    params: dict[str, Any], samples: int, top: int, engine: GenerationEngine
) -> SamplingParams:
    top_k = params.get("top_k")
    if top_k is not None and int(top_k) > 0:
        raise SampleError("top_k is not supported here; leave it at -1 and use top_p")
    seed = params.get("seed")
    return SamplingParams(
        max_tokens=int(params.get("max_tokens") or DEFAULT_MAX_TOKENS),
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        seed=None if seed is None else int(seed),
        stop=stop_strings(params.get("stop"), engine),
        n=samples,
        logprobs=True,
        top_logprobs=top,
    )


def stop_strings(
    stop: str | Sequence[str | int] | None, engine: GenerationEngine
) -> tuple[str, ...]:
    """Stop strings; a stop token id stops at its text (the end-of-sequence ids stop always)."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    out: list[str] = []
    for item in stop:
        if isinstance(item, int):
            if item not in engine.eos_ids:
                text = str(engine.tokenizer.decode([item]))
                if text:
                    out.append(text)
        else:
            out.append(str(item))
    return tuple(out)


def _sequence(seq: Any, completion: Completion, top: int) -> None:
    seq.stop_reason = (
        pb.STOP_REASON_STOP if completion.finish_reason == "stop" else (pb.STOP_REASON_LENGTH)
    )
    seq.tokens = np.asarray(completion.token_ids, dtype=np.int32).tobytes()
    logprobs = completion.logprobs or ()
    if logprobs:
        seq.logprobs = np.asarray([lp.logprob for lp in logprobs], dtype=np.float32).tobytes()
    if top and logprobs:
        ids = np.zeros((len(logprobs), top), dtype=np.int32)
        values = np.full((len(logprobs), top), -99999.0, dtype=np.float32)
        for i, lp in enumerate(logprobs):
            for j, alt in enumerate(lp.top[:top]):
                ids[i, j], values[i, j] = alt.token_id, alt.logprob
        seq.topk_sampled_logprobs.token_ids = ids.tobytes()
        seq.topk_sampled_logprobs.logprobs = values.tobytes()
        seq.topk_sampled_logprobs.k = top
        seq.topk_sampled_logprobs.length = len(logprobs)
