"""What the router tests send: datasets, plans, tokens; and the error bodies they expect."""

from __future__ import annotations

import json
from typing import Any

import httpx

from akka_training.core.documents import deep_merge


def chat_rows(count: int, offset: int = 0) -> bytes:
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} + {i}?"},
                {"role": "assistant", "content": f"#### {2 * i}"},
            ]
        }
        for i in range(offset, offset + count)
    ]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def register(api: httpx.Client, ref: str, data: bytes, **params: str) -> dict[str, Any]:
    response = api.post(f"/v1/datasets/{ref}", content=data, params=params)
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


def sft_plan(**changes: Any) -> dict[str, Any]:
    """An sft plan on the development chat model that the router tests' deployment admits."""
    plan = {
        "kind": "run",
        "project": "maths",
        "baseModel": "tiny-chat",
        "config": {
            "dataset": "maths/train",
            "method": "sft",
            "maxSeqLength": 256,
            "hyperparams": {"training": {"maxSteps": 4, "batchSize": 2}},
        },
        "execution": {"gpus": 1, "saveEvery": 2},
    }
    return deep_merge(plan, changes)


def project_token(api: httpx.Client, *projects: str) -> str:
    response = api.post("/v1/tokens", json={"name": "ci", "projects": list(projects)})
    assert response.status_code == 201, response.text
    token: str = response.json()["token"]
    return token


def error(code: str, message: str, problems: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The one JSON shape of every error the service answers."""
    body: dict[str, Any] = {"code": code, "message": message}
    if problems is not None:
        body["problems"] = problems
    return {"error": body}


def answer(response: httpx.Response) -> tuple[int, Any]:
    return response.status_code, response.json()


def grpo_plan(**changes: Any) -> dict[str, Any]:
    """A grpo plan on the development chat model, rewarded by one match term `correct`."""
    rl = {
        "config": {
            "method": "grpo",
            "hyperparams": None,
            "rlHyperparams": {
                "maxCompletionTokens": 64,
                "promptsPerStep": 2,
                "generationsPerPrompt": 2,
                "training": {"maxSteps": 4},
            },
            "reward": {"terms": [{"name": "correct", "kind": "match"}]},
        }
    }
    return deep_merge(sft_plan(**rl), changes)
