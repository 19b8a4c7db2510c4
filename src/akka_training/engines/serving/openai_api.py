"""The OpenAI API's chat and text completions as the generation engine answers them: a
request's body is checked and turned into a `GenerationRequest`, and the engine's result into
the answer's body (whole, or as stream chunks with the usage in the last).

Refusals are `ApiRefusal`s carrying OpenAI's error object and status."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from akka_training.engines.generation.schema import (
    Completion,
    Delta,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    TokenLogprob,
)

# The most completions one request may ask for.
MAX_N = 16
MAX_TOP_LOGPROBS = 20


class ApiRefusal(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.kind, self.param, self.status)


def error_body(message: str, kind: str, param: str | None, status: int) -> dict[str, Any]:
    codes = {400: None, 401: "invalid_api_key", 404: "model_not_found", 503: "unavailable"}
    return {"error": {"message": message, "type": kind, "param": param, "code": codes.get(status)}}


@dataclass(frozen=True)
class Call:
    """A checked request: the engine's requests (one per prompt), whether to stream, and the
    model name to answer with."""

    kind: str  # chat or text
    model: str
    requests: list[GenerationRequest]
    stream: bool
    id: str
    created: int


# The engine's chat_prompt (messages -> token ids) and text_prompt (text -> token ids).
ChatTokenizer = Callable[[Sequence[dict[str, Any]]], tuple[int, ...]]
TextTokenizer = Callable[[str], tuple[int, ...]]


def chat_call(body: dict[str, Any], adapter: str, chat_prompt: ChatTokenizer) -> Call:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiRefusal(400, "messages must be a non-empty list of {role, content}.", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ApiRefusal(400, f"messages[{i}] must be an object with a role.", "messages")
    sampling = _sampling(body, default_tokens=256, logprobs=_chat_logprobs(body))
    prompt = chat_prompt(messages)
    return Call(
        "chat",
        _model(body),
        [GenerationRequest(prompt, adapter, sampling)],
        bool(body.get("stream")),
        "chatcmpl-" + uuid.uuid4().hex,
        int(time.time()),
    )


def text_call(body: dict[str, Any], adapter: str, text_prompt: TextTokenizer) -> Call:
    prompt = body.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise ApiRefusal(400, "prompt must be a string or a non-empty list of strings.", "prompt")
    top = body.get("logprobs")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= 5):
        raise ApiRefusal(400, "logprobs must be an integer from 0 to 5.", "logprobs")
    sampling = _sampling(body, default_tokens=16, logprobs=(top is not None, top or 0))
    requests = [GenerationRequest(text_prompt(p), adapter, sampling) for p in prompts]
    return Call(
        "text",
        _model(body),
        requests,
        bool(body.get("stream")),
        "cmpl-" + uuid.uuid4().hex,
        int(time.time()),
    )


def answer(call: Call, results: Sequence[GenerationResult]) -> dict[str, Any]:
    """The whole answer's body."""
    choices = []
    width = call.requests[0].sampling.n
    for r, result in enumerate(results):
        for c in result.completions:
            choices.append(_choice(call, c, r * width + c.index))
    return {
        "id": call.id,
        "object": "chat.completion" if call.kind == "chat" else "text_completion",
        "created": call.created,
        "model": call.model,
        "choices": choices,
        "usage": usage(results),
    }


def chunk(call: Call, delta: Delta, first: bool) -> dict[str, Any]:
    """One stream chunk carrying `delta`'s text (a chat's first also names the role)."""
    index = delta.request * call.requests[0].sampling.n + delta.index
    if call.kind == "chat":
        content: dict[str, Any] = {"content": delta.text}
        if first:
            content["role"] = "assistant"
        choice: dict[str, Any] = {"index": index, "delta": content, "logprobs": None}
    else:
        choice = {"index": index, "text": delta.text, "logprobs": None}
    choice["finish_reason"] = delta.finish_reason
    return {
        "id": call.id,
        "object": "chat.completion.chunk" if call.kind == "chat" else "text_completion",
        "created": call.created,
        "model": call.model,
        "choices": [choice],
    }


def usage_chunk(call: Call, results: Sequence[GenerationResult]) -> dict[str, Any]:
    """The stream's last chunk: no choices, the usage."""
    return {
        "id": call.id,
        "object": "chat.completion.chunk" if call.kind == "chat" else "text_completion",
        "created": call.created,
        "model": call.model,
        "choices": [],
        "usage": usage(results),
    }


def usage(results: Sequence[GenerationResult]) -> dict[str, int]:
    prompt = sum(r.prompt_tokens * len(r.completions) for r in results)
    completion = sum(r.completion_tokens for r in results)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


# --- helpers -------------------------------------------------------------------------------


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiRefusal(400, "model is required: a base model, a run, or RUN:step-N.", "model")
    return model


def _chat_logprobs(body: dict[str, Any]) -> tuple[bool, int]:
    wanted = body.get("logprobs") or False
    top = body.get("top_logprobs")
    if top is not None:
        if not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= MAX_TOP_LOGPROBS:
            raise ApiRefusal(
                400,
                f"top_logprobs must be an integer from 0 to {MAX_TOP_LOGPROBS}.",
                "top_logprobs",
            )
        if not wanted:
            raise ApiRefusal(400, "top_logprobs needs logprobs set to true.", "top_logprobs")
    return bool(wanted), int(top or 0)


def _number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ApiRefusal(400, f"{name} must be a number, not {value!r}.", name)
    return float(value)


def _sampling(
    body: dict[str, Any], default_tokens: int, logprobs: tuple[bool, int]
) -> SamplingParams:
    tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if tokens is None:
        tokens = default_tokens
    if not isinstance(tokens, int) or isinstance(tokens, bool):
        raise ApiRefusal(400, f"max_tokens must be an integer, not {tokens!r}.", "max_tokens")
    n = body.get("n", 1) or 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_N:
        raise ApiRefusal(400, f"n must be an integer from 1 to {MAX_N}.", "n")
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else (stop or [])
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > 4:
        raise ApiRefusal(400, "stop must be a string or a list of up to 4 strings.", "stop")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ApiRefusal(400, f"seed must be an integer, not {seed!r}.", "seed")
    try:
        return SamplingParams(
            max_tokens=tokens,
            temperature=_number(body, "temperature", 1.0),
            top_p=_number(body, "top_p", 1.0),
            seed=seed,
            stop=tuple(stops),
            n=n,
            logprobs=logprobs[0],
            top_logprobs=logprobs[1],
        )
    except ValueError as exc:
        raise ApiRefusal(400, f"{exc}.", str(exc).split(" ")[0]) from exc


def _choice(call: Call, c: Completion, index: int) -> dict[str, Any]:
    if call.kind == "chat":
        return {
            "index": index,
            "message": {"role": "assistant", "content": c.text},
            "finish_reason": c.finish_reason,
            "logprobs": None
            if c.logprobs is None
            else {"content": [_chat_lp(t) for t in c.logprobs]},
        }
    return {
        "index": index,
        "text": c.text,
        "finish_reason": c.finish_reason,
        "logprobs": None if c.logprobs is None else _text_lp(c.logprobs),
    }


def _chat_lp(t: TokenLogprob) -> dict[str, Any]:
    return {
        "token": t.text,
        "logprob": t.logprob,
        "bytes": list(t.text.encode()),
        "top_logprobs": [
            {"token": a.text, "logprob": a.logprob, "bytes": list(a.text.encode())} for a in t.top
        ],
    }


def _text_lp(tokens: tuple[TokenLogprob, ...]) -> dict[str, Any]:
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t.text)
    return {
        "tokens": [t.text for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": [{a.text: a.logprob for a in t.top} for t in tokens],
        "text_offset": offsets,
    }
