"""The front door remembers a resolved (token, model) for a moment so that a burst is not held
up by the database: a token revoked through this service stops reaching the endpoint at once,
one revoked where it cannot see (another replica, the database) within `REMEMBER_SECONDS` of
the front door's clock."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
from sqlalchemy import select

from akka_training.server.front_door_routes import REMEMBER_SECONDS, FrontDoorRoutes
from akka_training.storage.ids import hash_secret
from akka_training.storage.models import Token
from akka_training.testing.app import InProcessTrainer
from tests.server.routers.test_front_door_metrics import engine_address

__all__ = ["engine_address"]  # the fixture: endpoint chat of maths, READY on a real engine

CHAT = {"model": "tiny-chat", "prompt": "2 + 3 =", "max_tokens": 2, "temperature": 0}
REFUSED = "The token is not known to this trainer or was revoked; log in again."


def project_token(api: httpx.Client) -> tuple[str, str]:
    made = api.post("/v1/tokens", json={"name": "door", "projects": ["maths"]})
    assert made.status_code == 201, made.text
    return made.json()["id"], made.json()["token"]


def test_a_token_revoked_through_the_service_is_refused_by_the_next_request(
    trainer: InProcessTrainer, api: httpx.Client, engine_address: str
) -> None:
    token_id, secret = project_token(api)
    caller = trainer.client(secret)
    assert caller.post("/openai/v1/completions", json=CHAT).status_code == 200
    assert api.delete(f"/v1/tokens/{token_id}").status_code == 200
    refused = caller.post("/openai/v1/completions", json=CHAT)
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == REFUSED


def test_a_token_revoked_out_of_sight_stops_within_the_remembered_seconds(
    trainer: InProcessTrainer, api: httpx.Client, engine_address: str
) -> None:
    now = [1000.0]
    trainer.app.state.front_door_routes = FrontDoorRoutes(monotonic=lambda: now[0])
    _, secret = project_token(api)
    caller = trainer.client(secret)
    assert caller.post("/openai/v1/completions", json=CHAT).status_code == 200
    with trainer.ctx.db.session() as session:  # as another replica of the service would
        token = session.scalar(select(Token).where(Token.hash == hash_secret(secret)))
        assert token is not None
        token.revoked_at = datetime.now(UTC)
    now[0] += REMEMBER_SECONDS - 0.5
    assert caller.post("/openai/v1/completions", json=CHAT).status_code == 200
    now[0] += 0.5
    refused = caller.post("/openai/v1/completions", json=CHAT)
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == REFUSED


def test_requests_arriving_together_share_one_look_up_and_its_refusal() -> None:
    import asyncio

    from akka_training.core.errors import Unauthorized
    from akka_training.server.auth import Principal
    from akka_training.server.front_door_routes import Resolved
    from akka_training.server.services.endpoints import Route

    ready = Resolved(Principal("t", "door", "project", ("maths",)), Route("e", "http://x", None))
    looked: list[str] = []

    async def burst(answer: Resolved | None) -> list[Resolved | BaseException]:
        routes = FrontDoorRoutes(monotonic=lambda: 0.0)
        release = asyncio.Event()

        async def look_up() -> Resolved:
            looked.append("once")
            await release.wait()
            if answer is None:
                raise Unauthorized(REFUSED)
            return answer

        waiting = [
            asyncio.ensure_future(routes.resolve("secret", "tiny-chat", look_up)) for _ in range(8)
        ]
        release.set()
        return list(await asyncio.gather(*waiting, return_exceptions=True))

    assert asyncio.run(burst(ready)) == [ready] * 8
    refused = asyncio.run(burst(None))
    assert [str(e) for e in refused] == [REFUSED] * 8
    assert looked == ["once", "once"]
