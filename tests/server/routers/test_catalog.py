"""The catalog and capacity through the real app, on the development catalog."""

from __future__ import annotations

import httpx

from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, error, project_token, register, sft_plan


def test_base_models_and_the_runs_a_model_admits(api: httpx.Client) -> None:
    assert api.get("/v1/base-models").json() == [
        {
            "id": "tiny-chat",
            "status": "available",
            "modality": "text",
            "methods": ["sft", "dpo", "grpo", "gspo"],
        },
        {
            "id": "tiny-vision",
            "status": "available",
            "modality": "image-text",
            "methods": ["sft", "grpo", "gspo"],
        },
    ]
    chat = api.get("/v1/base-models/tiny-chat").json()
    assert (chat["engine"], chat["contextLength"]) == ("trl", 2048)
    # SFT and DPO train on TRL whatever the reinforcement engine.
    assert chat["methodsByEngine"] == {
        "trl": ["sft", "dpo", "grpo", "gspo"],
        "verl": ["sft", "dpo", "grpo", "gspo"],
    }
    # Under TRL every method runs at one GPU; verl's envelopes are listed but not admitted here.
    assert [(e["method"], e["engine"], e["gpus"]) for e in chat["admitted"]] == [
        ("sft", "trl", 1),
        ("dpo", "trl", 1),
        ("grpo", "trl", 1),
        ("gspo", "trl", 1),
    ]
    assert chat["admitted"][0] == {
        "method": "sft",
        "engine": "trl",
        "gpus": 1,
        "precision": "FP32",
        "gpuMemoryGib": 2.0,
        "hostMemoryGib": 4.0,
    }
    envelopes = api.get("/v1/envelopes").json()
    assert sum(e["admitted"] for e in envelopes if e["model"] == "tiny-chat") == 4
    assert sum(not e["admitted"] for e in envelopes if e["model"] == "tiny-chat") == 8
    assert answer(api.get("/v1/base-models/qwen-72b")) == (
        404,
        error(
            "not-found",
            "There is no base model 'qwen-72b' in the catalog; models: tiny-chat, tiny-vision.",
        ),
    )


def test_capacity_shows_pools_claims_and_projects(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    register(api, "maths/train", chat_rows(4))
    queued = api.post("/v1/runs", json=sft_plan()).json()["id"]
    admitted = api.post("/v1/runs", json=sft_plan()).json()["id"]
    trainer.admit(admitted)

    capacity = api.get("/v1/capacity").json()

    # Without a controller nothing was observed, so nothing counts as outside the trainer.
    assert capacity["pools"] == [
        {
            "pool": "default",
            "accelerator": "cpu",
            "free": 1,
            "granted": 1,
            "outside": 0,
            "declared": 2,
            "observed": None,
            "queued": 1,
            "maxClaim": 2,
            "hostRamGib": 16.0,
        }
    ]
    assert [
        (c["kind"], c["for"], c["project"], c["devices"], c["state"]) for c in capacity["claims"]
    ] == [
        ("run", queued, "maths", 1, "QUEUED"),
        ("run", admitted, "maths", 1, "GRANTED"),
    ]
    assert capacity["projects"] == [{"project": "maths", "quota": 2, "held": 1, "queued": 1}]


def test_capacity_of_one_project(api: httpx.Client, trainer: InProcessTrainer) -> None:
    register(api, "maths/train", chat_rows(4))
    api.post("/v1/runs", json=sft_plan())
    api.post("/v1/projects", json={"name": "physics", "quota": 1})
    physicist = trainer.client(project_token(api, "physics"))

    mine = physicist.get("/v1/capacity", params={"project": "physics"}).json()

    assert mine["claims"] == []
    assert mine["projects"] == [{"project": "physics", "quota": 1, "held": 0, "queued": 0}]
    # The pools are the deployment's, whoever asks.
    assert [p["queued"] for p in mine["pools"]] == [1]
