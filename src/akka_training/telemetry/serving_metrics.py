"""The front door's metrics under OpenTelemetry's GenAI semantic conventions
(`catalog.GENAI_METRICS`): request duration, time to first token, time per output token and
token usage, per project, endpoint and model.

They are measured from the answer as it is relayed to the caller, not from anything the engine
reports: an `Exchange` is handed each piece of the answer's body (`feed`) and told how it ended
(`finish`). A streamed answer (server-sent events) is read event by event: the first chunk that
carries generated text marks the first token, the chunk with ``usage`` gives the tokens, the
chunks' ``model`` the response model. A whole (JSON) answer gives its usage and model at the
end; it has no first token to time.

Usage in the front door::

    exchange = metrics.exchange("chat", model, project, endpoint, started=arrived)
    exchange.refused(503)          # no answer: recorded at once
    ...
    exchange.streaming(content_type)
    for piece in upstream: exchange.feed(piece); yield piece
    exchange.finish(status)        # or finish(status, error) when relaying broke off
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.metrics import Meter

from akka_training.telemetry import catalog as c
from akka_training.telemetry.otel import create_instruments

# A whole answer longer than this is relayed but not read for its usage.
MAX_READ_BYTES = 8 * 1024 * 1024


class ServingMetrics:
    """The GenAI histograms on `meter` (the service's meter provider)."""

    def __init__(self, meter: Meter, clock: Callable[[], float] = time.monotonic) -> None:
        self._instruments = create_instruments(meter, c.GENAI_METRICS)
        self._clock = clock

    def exchange(
        self,
        operation: str,
        request_model: str,
        project: str,
        endpoint: str,
        *,
        started: float | None = None,
    ) -> Exchange:
        """One front-door request for `request_model`, routed to `endpoint` of `project`;
        `started`: when it arrived, on this metrics' clock (default: now)."""
        return Exchange(
            self,
            {
                c.GENAI_OPERATION: operation,
                c.GENAI_PROVIDER: c.GENAI_PROVIDER_NAME,
                c.GENAI_REQUEST_MODEL: request_model,
                c.PROJECT: project,
                c.ENDPOINT: endpoint,
            },
            self._clock() if started is None else started,
            self._clock,
        )

    def now(self) -> float:
        return self._clock()

    def record(self, name: str, value: float, attributes: dict[str, str]) -> None:
        self._instruments[name].record(value, attributes)


class Exchange:
    """One request's answer, measured as it passes; recorded once, by `finish` or `refused`."""

    def __init__(
        self,
        metrics: ServingMetrics,
        attributes: dict[str, str],
        started: float,
        clock: Callable[[], float],
    ) -> None:
        self._metrics = metrics
        self._attributes = attributes
        self._started = started
        self._clock = clock
        self._stream = False
        self._buffer = b""
        self._body: list[bytes] | None = []
        self._size = 0
        self._first_token: float | None = None
        self._usage: tuple[int, int] | None = None
        self._response_model: str | None = None
        self._answered = False  # a stream's `[DONE]` was relayed: the caller has it all
        self._done = False

    def streaming(self, content_type: str | None) -> None:
        """The answer's content type: server-sent events are read as they come."""
        self._stream = (content_type or "").startswith("text/event-stream")

    def feed(self, piece: bytes) -> None:
        """A piece of the answer's body, as relayed to the caller."""
        if self._stream:
            self._buffer += piece
            while True:
                event, sep, rest = self._buffer.partition(b"\n\n")
                if not sep:
                    break
                self._buffer = rest
                self._event(event)
        elif self._body is not None:
            self._size += len(piece)
            if self._size > MAX_READ_BYTES:
                self._body = None
            else:
                self._body.append(piece)

    def refused(self, status: int) -> None:
        """The front door answered `status` itself (no endpoint answered)."""
        self.finish(status)

    def finish(self, status: int, error: BaseException | None = None) -> None:
        """The answer ended with `status`; `error`: why relaying it broke off."""
        if self._done:
            return
        self._done = True
        end = self._clock()
        if self._stream and self._buffer.strip():
            self._event(self._buffer)
        elif not self._stream and self._body:
            self._whole(b"".join(self._body))
        attributes = dict(self._attributes)
        if self._response_model is not None:
            attributes[c.GENAI_RESPONSE_MODEL] = self._response_model
        # A caller may close as soon as it reads `[DONE]` (the openai SDK does), before the
        # relay sees the endpoint's end: the answer was whole, so that is no failure.
        failure = _error_type(status, None if self._answered else error)
        timed = dict(attributes)
        if failure is not None:
            timed[c.ERROR_TYPE] = failure
        self._metrics.record("gen_ai.server.request.duration", end - self._started, timed)
        if failure is not None:
            return
        if self._usage is not None:
            for kind, tokens in zip(c.TOKEN_TYPES, self._usage, strict=True):
                self._metrics.record(
                    "gen_ai.client.token.usage", tokens, {**attributes, c.TOKEN_TYPE: kind}
                )
        if self._first_token is not None:
            self._metrics.record(
                "gen_ai.server.time_to_first_token", self._first_token - self._started, attributes
            )
            output = self._usage[1] if self._usage is not None else 0
            if output > 1:
                self._metrics.record(
                    "gen_ai.server.time_per_output_token",
                    (end - self._first_token) / (output - 1),
                    attributes,
                )

    # --- internals ---------------------------------------------------------------------------

    def _event(self, event: bytes) -> None:
        for line in event.splitlines():
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                self._answered = True
                continue
            if (
                self._first_token is not None
                and self._response_model is not None
                and b'"usage"' not in data
            ):
                continue  # nothing left to read in it: the relay parses no more than it needs
            chunk = _json(data)
            if chunk is None:
                continue
            if self._first_token is None and _carries_text(chunk):
                self._first_token = self._clock()
            self._read(chunk)

    def _whole(self, body: bytes) -> None:
        answer = _json(body)
        if answer is not None:
            self._read(answer)

    def _read(self, answer: dict[str, Any]) -> None:
        model = answer.get("model")
        if isinstance(model, str) and model:
            self._response_model = model
        usage = answer.get("usage")
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int) and isinstance(completion, int):
                self._usage = (prompt, completion)


def _json(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _carries_text(chunk: dict[str, Any]) -> bool:
    """Whether a stream chunk carries generated text (a chat delta's content, a completion's
    text): a chunk naming the role only, or the usage, carries none."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(text, str) and text:
            return True
    return False


def _error_type(status: int, error: BaseException | None) -> str | None:
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return "cancelled"
    if error is not None:
        return type(error).__name__
    return str(status) if status >= 400 else None
