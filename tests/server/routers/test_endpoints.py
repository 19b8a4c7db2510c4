"""Endpoints through the API in this process: created QUEUED with a claim on the pool, each
refusal in its words, another project's endpoint answering as one that does not exist, and the
front door's OpenAI error objects before any job serves."""

from __future__ import annotations

from typing import Any

import httpx

from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, project_token, register, sft_plan


def create(api: httpx.Client, **body: Any) -> httpx.Response:
    return api.post(
        "/v1/endpoints",
        json={"project": "maths", "name": "chat", "baseModel": "tiny-chat", **body},
    )


def message(response: httpx.Response) -> str:
    return str(response.json()["error"]["message"])


def test_an_endpoint_is_created_queued_with_a_claim_and_deleted(api: httpx.Client) -> None:
    status, body = answer(create(api))
    assert status == 201
    assert (body["name"], body["phase"], body["gpus"], body["adapters"]) == (
        "chat",
        "QUEUED",
        1,
        [],
    )
    # Which engine serves it is known once its job says so.
    assert body["engine"] is None
    claims = api.get("/v1/capacity").json()["claims"]
    assert [(c["for"], c["devices"]) for c in claims] == [(body["id"], 1)]
    assert [e["name"] for e in api.get("/v1/endpoints").json()] == ["chat"]
    assert api.get("/v1/endpoints/maths/chat").json()["phase"] == "QUEUED"

    again = create(api)
    assert again.status_code == 409
    assert message(again) == (
        "Project maths has an endpoint chat already; delete it first (`akka training "
        "endpoints delete chat`) or choose another name."
    )

    deleted = api.delete("/v1/endpoints/maths/chat")
    assert deleted.json()["phase"] == "STOPPED"
    assert api.get("/v1/endpoints").json() == []
    assert [e["phase"] for e in api.get("/v1/endpoints", params={"all": True}).json()] == [
        "STOPPED"
    ]


def test_refusals_name_what_to_change(api: httpx.Client) -> None:
    pool = create(api, pool="nowhere")
    assert pool.status_code == 400
    assert message(pool).startswith("There is no pool 'nowhere'; choose one of default")
    many = create(api, gpus=99)
    assert many.status_code == 400
    assert "The endpoint claims 99 devices, more than pool default accepts" in message(many)
    unknown = create(api, adapters=["nosuchrun"])
    assert unknown.status_code == 404
    assert message(unknown) == "There is no run or modelName 'nosuchrun' in project maths."
    register(api, "maths/train", chat_rows(8))
    run = api.post("/v1/runs", json=sft_plan()).json()["id"]
    queued = create(api, adapters=[run])
    assert queued.status_code == 409
    assert message(queued) == (
        f"Run {run} has no final adapter (it is QUEUED); wait for it to complete, or serve "
        f"one of its snapshots ({run}:SNAPSHOT)."
    )
    snapshot = create(api, adapters=[f"{run}:step-9"])
    assert snapshot.status_code == 404
    assert message(snapshot) == f"Run {run} has no snapshot 'step-9'."

    assert create(api).status_code == 201
    missing = api.delete("/v1/endpoints/maths/chat/adapters/other")
    assert missing.status_code == 404
    assert message(missing) == "Endpoint chat does not serve 'other'; it serves: none."


def test_another_projects_endpoint_is_not_found(
    trainer: InProcessTrainer, api: httpx.Client
) -> None:
    api.post("/v1/projects", json={"name": "other"})
    assert create(api).status_code == 201
    other = trainer.client(project_token(api, "other"))
    got = other.get("/v1/endpoints/maths/chat")
    assert got.status_code == 404
    assert message(got) == "Project maths has no endpoint 'chat'."
    assert other.get("/v1/endpoints").json() == []
    door = other.post(
        "/openai/v1/chat/completions",
        json={"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert door.status_code == 404
    assert door.json()["error"]["code"] == "model_not_found"
    assert door.json()["error"]["message"] == (
        "The model 'tiny-chat' does not exist or no endpoint of your projects serves it; "
        "create one with `akka training endpoints create`."
    )


def test_the_front_door_answers_openai_error_objects(
    trainer: InProcessTrainer, api: httpx.Client
) -> None:
    chat = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}]}
    anonymous = trainer.client(anonymous=True)
    refused = anonymous.post("/openai/v1/chat/completions", json=chat)
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    assert refused.json()["error"]["message"].startswith("This request needs a token")

    no_model = api.post("/openai/v1/completions", json={"prompt": "hi"})
    assert no_model.status_code == 400
    assert no_model.json()["error"] == {
        "message": "model is required: a base model, a run, or RUN:step-N.",
        "type": "invalid_request_error",
        "param": "model",
        "code": None,
    }
    not_json = api.post("/openai/v1/completions", content=b"{", headers={"Content-Type": "x"})
    assert not_json.status_code == 400
    assert not_json.json()["error"]["message"] == "The request's body is not JSON."

    # An endpoint whose job has not reported an address yet: come back later.
    assert create(api).status_code == 201
    starting = api.post("/openai/v1/chat/completions", json=chat)
    assert starting.status_code == 503
    assert starting.headers["Retry-After"] == "5"
    assert starting.json()["error"]["message"] == (
        "The endpoint serving tiny-chat is starting; try again in a few seconds."
    )
    assert [m["id"] for m in api.get("/openai/v1/models").json()["data"]] == ["tiny-chat"]


def test_an_endpoint_that_cannot_be_admitted_answers_429_saying_which_limit(
    trainer: InProcessTrainer, api: httpx.Client
) -> None:
    # Two runs hold both devices of the pool, and project maths's whole quota of 2.
    register(api, "maths/train", chat_rows(8))
    for steps in (4, 5):
        plan = sft_plan(config={"hyperparams": {"training": {"maxSteps": steps}}})
        started = api.post("/v1/runs", json=plan)
        assert started.status_code == 200, started.text
        trainer.admit(started.json()["id"])
    assert create(api).status_code == 201
    chat = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}]}

    quota = api.post("/openai/v1/chat/completions", json=chat)
    assert quota.status_code == 429
    assert quota.json()["error"] == {
        "message": "Project maths's quota is 2 device(s) and it holds 2: the endpoint serving "
        "tiny-chat needs 1 more to start. Free some (`akka training capacity --project maths` "
        "shows what holds them; delete an endpoint or cancel a run) or ask an admin to raise "
        "the quota.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }

    # Without a quota, the pool is what cannot admit it.
    assert api.put("/v1/projects/maths/quota", json={"quota": None}).status_code == 200
    pool = api.post("/openai/v1/completions", json={"model": "tiny-chat", "prompt": "hi"})
    assert pool.status_code == 429
    assert pool.json()["error"]["code"] == "pool_full"
    assert pool.json()["error"]["message"] == (
        "Pool default has 0 device(s) free: the endpoint serving tiny-chat needs 1 to start. "
        "Try again when runs or endpoints give devices back (`akka training capacity` shows "
        "the pool), or serve it from another pool."
    )
