"""The route class of every router: a synchronous handler's database session ends in the
handler's own worker thread.

FastAPI ends a dependency such as `Db` (commit, connection back to the pool) in a later hop
through the event loop. Under a burst the loop is slow to make that hop (forty worker threads
share one interpreter lock with it), and meanwhile every finished request keeps its connection,
and on SQLite the write turn it took, while new requests take more: a burst of a hundred
submissions ran the pool dry and answered 503. Committing (or, when the handler raised, rolling
back) before the handler's thread is given back bounds the connections in use by the worker
threads, and the dependency's own end finds nothing left to do.

The route class also reads JSON bodies refusing a key given twice in one object (`StrictJson`):
Python's reader keeps the last, so a plan with two `learningRate` keys trained on whichever came
second without a word, where the same plan as YAML is refused.

Answers are written by `FiniteJson`: a non-finite figure (a diverging run's NaN loss) goes as
its text (``"NaN"``), where Starlette's writer would raise and answer 500."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from sqlalchemy.orm import Session
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from akka_training.core.errors import InvalidRequest
from akka_training.core.figures import json_safe


class FiniteJson(JSONResponse):
    """The service's JSON answers: a non-finite number as its text (`core.figures.json_safe`)."""

    def render(self, content: Any) -> bytes:
        return super().render(json_safe(content))


class SessionEndingRoute(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = _ending_sessions(endpoint)
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJson(request.scope, request.receive))

        return strict


class StrictJson(Request):
    """A request whose JSON body refuses duplicate keys (FastAPI reads bodies through
    `json()`; the refusal reaches the user as a 400 naming the key)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), object_pairs_hook=_unique_keys)
        return self._json


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise InvalidRequest(
                f"The request body gives the key {key!r} twice in one object; give it once."
            )
        seen[key] = value
    return seen


def _ending_sessions(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    # functools.wraps keeps the signature (inspect follows __wrapped__), from which FastAPI
    # reads the parameters and their dependencies.
    @functools.wraps(endpoint)
    def handler(*args: Any, **kwargs: Any) -> Any:
        sessions = [v for v in kwargs.values() if isinstance(v, Session)]
        try:
            result = endpoint(*args, **kwargs)
        except BaseException:
            for session in sessions:
                session.rollback()
            raise
        for session in sessions:
            session.commit()
        return result

    return handler
