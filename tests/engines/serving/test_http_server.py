"""The endpoint's own server answers its trainer only: a request without the key the job
reported is refused, with the key it is answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from akka_training.core.serving import KEY_HEADER
from akka_training.engines.serving.http_server import EndpointServer


@pytest.fixture(scope="module")
def server(catalog: dict[str, dict[str, Any]]) -> Any:
    from akka_training.engines.generation.engine import GenerationEngine

    engine = GenerationEngine(Path(catalog["tiny-chat"]["path"]), device="cpu")
    served = EndpointServer(engine, "the-key").start()
    yield served
    served.close()


BODY = {"model": "m", "prompt": "1+1=", "max_tokens": 2, "temperature": 0}


def test_a_request_without_the_key_is_refused(server: EndpointServer) -> None:
    for headers in ({}, {KEY_HEADER: "another-key"}):
        answer = httpx.post(f"{server.address}/v1/completions", json=BODY, headers=headers)
        assert answer.status_code == 403
        assert answer.json()["error"]["message"] == "This endpoint answers its trainer only."
        assert httpx.get(f"{server.address}/health", headers=headers).status_code == 403


def test_the_trainer_with_the_key_is_answered(server: EndpointServer) -> None:
    headers = {KEY_HEADER: "the-key"}
    answer = httpx.post(f"{server.address}/v1/completions", json=BODY, headers=headers)
    assert answer.status_code == 200
    assert answer.json()["usage"]["completion_tokens"] == 2
    assert httpx.get(f"{server.address}/health", headers=headers).json()["status"] == "ok"
