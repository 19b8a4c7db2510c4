"""JSON request bodies are read as strictly as YAML plans: a key given twice is refused."""

from __future__ import annotations

import httpx

from tests.server.routers.helpers import answer, error


def test_a_key_given_twice_in_a_json_body_is_refused(api: httpx.Client) -> None:
    body = b'{"kind": "run", "project": "maths", "project": "optics"}'
    assert answer(
        api.post("/v1/runs", content=body, headers={"content-type": "application/json"})
    ) == (
        400,
        error(
            "invalid",
            "The request body gives the key 'project' twice in one object; give it once.",
        ),
    )
    nested = b'{"name": "maths", "description": "a", "quota": 1, "quota": 2}'
    assert answer(
        api.post("/v1/projects", content=nested, headers={"content-type": "application/json"})
    )[1]["error"]["message"] == (
        "The request body gives the key 'quota' twice in one object; give it once."
    )


def test_a_json_body_without_repeats_is_read_as_before(api: httpx.Client) -> None:
    created = api.post("/v1/projects", json={"name": "optics", "quota": 2})
    assert created.status_code == 201, created.text
    assert api.get("/v1/projects/optics").json()["quota"] == 2
