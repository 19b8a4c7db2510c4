"""The front door's side of its GenAI metrics (`telemetry.serving_metrics`): when a request
arrived, the `Exchange` that measures it once its endpoint is known, and the relay of the
endpoint's answer through that exchange.

Requests refused before an endpoint is known (401, an unknown model, a body that is not JSON)
belong to no endpoint and are not measured."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from fastapi import Request

from akka_training.server.services.endpoints import Route
from akka_training.telemetry.serving_metrics import Exchange, ServingMetrics

CHAT_PATH = "/v1/chat/completions"


def arrived(request: Request) -> float:
    """Now, on the clock of the front door's metrics (0.0 where the app has none)."""
    metrics = _metrics(request)
    return metrics.now() if metrics is not None else 0.0


def exchange(
    request: Request, path: str, model: str, route: Route, started: float
) -> Exchange | None:
    """The measure of a request for `model` that `route` sends to an endpoint."""
    metrics = _metrics(request)
    if metrics is None:
        return None
    operation = "chat" if path == CHAT_PATH else "text_completion"
    return metrics.exchange(operation, model, route.project, route.name, started=started)


def refused(exchange: Exchange | None, status: int) -> None:
    """Count the request as ended by a refusal of the front door's own, with `status`."""
    if exchange is not None:
        exchange.refused(status)


async def relayed(
    pieces: AsyncIterator[bytes], exchange: Exchange | None, upstream: httpx.Response
) -> AsyncIterator[bytes]:
    """`pieces` of the endpoint's answer `upstream`, passed on as they come and measured on the
    way."""
    error: BaseException | None = None
    try:
        if exchange is not None:
            exchange.streaming(upstream.headers.get("content-type"))
        async for piece in pieces:
            if exchange is not None:
                exchange.feed(piece)
            yield piece
    except BaseException as exc:
        error = exc
        raise
    finally:
        if exchange is not None:
            exchange.finish(upstream.status_code, error)
        # Closed here too when the caller goes away between two pieces.
        close = getattr(pieces, "aclose", None)
        if close is not None:
            await close()


def _metrics(request: Request) -> ServingMetrics | None:
    telemetry = getattr(request.app.state, "telemetry", None)
    service = getattr(telemetry, "metrics", None)
    serving = getattr(service, "serving", None)
    return serving if isinstance(serving, ServingMetrics) else None
