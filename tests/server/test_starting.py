"""A trainer that is starting answers "starting" on its port (503, Retry-After) to any request,
and a client waits for it, saying so once, up to its start budget."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from akka_training.client.retries import RetryPolicy
from akka_training.client.trainer import TrainerClient
from akka_training.core.errors import TrainerUnreachable
from akka_training.server.starting import StartingResponder, listen
from akka_training.testing.service import free_port


@pytest.fixture
def starting() -> Iterator[StartingResponder]:
    responder = StartingResponder(listen("127.0.0.1", free_port())).start()
    yield responder
    responder.stop()
    responder.sock.close()


def url(responder: StartingResponder) -> str:
    host, port = responder.sock.getsockname()[:2]
    return f"http://{host}:{port}"


def test_every_request_is_answered_starting_with_a_retry_after(
    starting: StartingResponder,
) -> None:
    with httpx.Client(base_url=url(starting)) as http:
        for response in (
            http.get("/v1/info"),
            http.post("/v1/projects", json={"name": "demo", "quota": 1}),
        ):
            assert response.status_code == 503
            assert response.headers["retry-after"] == "1"
            error = response.json()["error"]
            assert error["code"] == "starting"
            assert error["message"] == (
                "The trainer is starting (a first start builds the development models, about "
                "half a minute)."
            )


@pytest.mark.slow  # the client waits out the trainer's Retry-After (1 s)
def test_a_request_waits_for_a_starting_trainer_and_says_so_once(
    starting: StartingResponder,
) -> None:
    said: list[str] = []
    client = TrainerClient(url(starting), retries=RetryPolicy(start_seconds=0.5))
    client.on_starting = said.append
    with client, pytest.raises(TrainerUnreachable) as raised:
        client.request("POST", "/v1/projects", json={"name": "demo", "quota": 1})
    assert said == [
        "The trainer is starting (a first start builds the development models, about half a "
        "minute)."
    ]
    assert raised.value.message == (
        f"The trainer at {url(starting)} was still starting after 0.5 s; its log says what it "
        "is doing."
    )
