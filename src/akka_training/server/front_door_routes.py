"""The front door's short memory of resolved requests: who a token is and where its `model`
is served, kept for `REMEMBER_SECONDS` so that a burst of requests does not each check the
token and look the model up in the database before it is relayed (`bench/serving.py`). Requests
that arrive together with the same token and model share one look-up (`resolve`).

Only what may be reused is kept: a token that authenticated and a model served by a READY
endpoint (one that must be started, or that is refused, is looked up every time). What this
service changes empties it at once (a token revoked, an endpoint created, deleted, or given or
relieved of an adapter); a change it cannot see (another replica's, a token expiring, a job
moving to another address) takes effect within `REMEMBER_SECONDS`, and a relay the endpoint
does not answer forgets its route.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import FastAPI

from akka_training.server.auth import Principal
from akka_training.server.services.endpoints import Route
from akka_training.storage.ids import hash_secret

# How long a resolved (token, model) is reused: the longest a revoked token (revoked through
# another replica) or an expired one still reaches an endpoint.
REMEMBER_SECONDS = 2.0
# The most (token, model) pairs kept; beyond it the oldest go.
MOST = 4096


@dataclass(frozen=True)
class Resolved:
    principal: Principal
    route: Route


class FrontDoorRoutes:
    """(token, model) → `Resolved`, each for `seconds` on `monotonic`'s clock."""

    def __init__(
        self,
        seconds: float = REMEMBER_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        most: int = MOST,
    ) -> None:
        self.seconds = seconds
        self._monotonic = monotonic
        self._most = most
        self._kept: dict[tuple[str, str], tuple[float, Resolved]] = {}
        self._lock = threading.Lock()
        # Look-ups under way, by (token hash, model): touched on the event loop only.
        self._looking: dict[tuple[str, str], asyncio.Task[Resolved]] = {}

    async def resolve(
        self, secret: str, model: str, look_up: Callable[[], Awaitable[Resolved]]
    ) -> Resolved:
        """What `secret` and `model` resolve to: remembered, or looked up by `look_up` once
        for every request that asks while it runs (its error raised to each of them), and
        remembered when its endpoint is READY."""
        found = self.get(secret, model)
        if found is not None:
            return found
        key = (hash_secret(secret), model)
        task = self._looking.get(key)
        if task is None:

            async def look() -> Resolved:
                try:
                    resolved = await look_up()
                finally:
                    del self._looking[key]
                if resolved.route.address is not None:
                    self.keep(secret, model, resolved)
                return resolved

            task = self._looking[key] = asyncio.ensure_future(look())
            # Retrieved here too, in case every request that waited for it went away.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(task)

    def get(self, secret: str, model: str) -> Resolved | None:
        key = (hash_secret(secret), model)
        with self._lock:
            found = self._kept.get(key)
            if found is None:
                return None
            if self._monotonic() >= found[0]:
                del self._kept[key]
                return None
            return found[1]

    def keep(self, secret: str, model: str, resolved: Resolved) -> None:
        with self._lock:
            if len(self._kept) >= self._most:
                del self._kept[next(iter(self._kept))]
            self._kept[(hash_secret(secret), model)] = (
                self._monotonic() + self.seconds,
                resolved,
            )

    def forget(self, address: str | None = None) -> None:
        """Forget every route (to `address` only, when given)."""
        with self._lock:
            if address is None:
                self._kept.clear()
                return
            for key in [k for k, (_, r) in self._kept.items() if r.route.address == address]:
                del self._kept[key]


_MAKING = threading.Lock()


def routes_of(app: FastAPI) -> FrontDoorRoutes:
    """The app's memory of routes, made on first use."""
    routes = getattr(app.state, "front_door_routes", None)
    if routes is None:
        with _MAKING:
            routes = getattr(app.state, "front_door_routes", None)
            if routes is None:
                routes = app.state.front_door_routes = FrontDoorRoutes()
    assert isinstance(routes, FrontDoorRoutes)
    return routes
