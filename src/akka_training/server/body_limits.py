"""A size limit on the bodies that carry plans, enforced while the body arrives.

uvicorn sets no limit on a request body and FastAPI reads a JSON body whole before any handler
runs, so a plan route would otherwise hold whatever a client sends. `PlanBodyLimit` counts the
bytes of ``POST /v1/runs``, ``/v1/pipelines`` and a run's ``branch`` and ``continue`` as they
are received and refuses the request (413, code too-large) once they pass
`limits.MAX_PLAN_BYTES`, at once when the Content-Length says so. Dataset and bundle uploads
stream to the blob store and have their own limits.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from akka_training.core.errors import PayloadTooLarge
from akka_training.core.limits import MAX_PLAN_BYTES

_PLAN_ROUTES = re.compile(r"^/v1/(runs|pipelines)(/[^/]+/(branch|continue))?/?$")


class PlanBodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_PLAN_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not _PLAN_ROUTES.match(scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        received = 0

        async def counted() -> Message:
            nonlocal received
            # Raised from inside the handler's read of the body, so the service's error
            # handlers answer it in the one error shape.
            if declared is not None and declared > self.max_bytes:
                raise too_large(self.max_bytes)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large(self.max_bytes)
            return message

        await self.app(scope, counted, send)


def too_large(max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The plan is larger than the {max_bytes:,} bytes a plan may be; a plan this large "
        "is not a plan: check what sent it."
    )


def _content_length(scope: Scope) -> int | None:
    headers: Any = scope.get("headers") or []
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
