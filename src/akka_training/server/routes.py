"""The route class of every router: a synchronous handler's database session ends in the
handler's own worker thread.

FastAPI ends a dependency such as `Db` (commit, connection back to the pool) in a later hop
through the event loop. Under a burst the loop is slow to make that hop (forty worker threads
share one interpreter lock with it), and meanwhile every finished request keeps its connection,
and on SQLite the write turn it took, while new requests take more: a burst of a hundred
submissions ran the pool dry and answered 503. Committing (or, when the handler raised, rolling
back) before the handler's thread is given back bounds the connections in use by the worker
threads, and the dependency's own end finds nothing left to do."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from fastapi.routing import APIRoute
from sqlalchemy.orm import Session


class SessionEndingRoute(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = _ending_sessions(endpoint)
        super().__init__(path, endpoint, **kwargs)


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
