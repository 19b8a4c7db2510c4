"""Projects through the real app: the configured ones, create, read, quota, refusals."""

from __future__ import annotations

import httpx

from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, error, project_token


def test_a_configured_project_exists_with_its_quota(api: httpx.Client) -> None:
    (maths,) = api.get("/v1/projects").json()
    assert {k: maths[k] for k in ("name", "quota", "held", "queued")} == {
        "name": "maths",
        "quota": 2,
        "held": 0,
        "queued": 0,
    }


def test_create_get_and_set_a_quota(api: httpx.Client, trainer: InProcessTrainer) -> None:
    created = api.post("/v1/projects", json={"name": "physics", "description": "waves"})
    token = project_token(api, "physics")

    assert created.status_code == 201
    assert {k: created.json()[k] for k in ("name", "description", "quota")} == {
        "name": "physics",
        "description": "waves",
        "quota": None,
    }
    detail = api.get("/v1/projects/physics").json()
    assert [(m["name"], m["kind"]) for m in detail["members"]] == [
        ("admin (in-process trainer)", "admin"),
        ("ci", "project"),
    ]
    # Members are listed admins first, then each kind oldest first, on every database.
    api.post("/v1/tokens", json={"name": "ops", "admin": True})
    detail = api.get("/v1/projects/physics").json()
    assert [(m["name"], m["kind"]) for m in detail["members"]] == [
        ("admin (in-process trainer)", "admin"),
        ("ops", "admin"),
        ("ci", "project"),
    ]
    assert api.put("/v1/projects/physics/quota", json={"quota": 3}).json()["quota"] == 3
    assert [p["name"] for p in api.get("/v1/projects").json()] == ["maths", "physics"]
    # A project token reads its project but may not change its quota.
    member = trainer.client(token)
    assert member.get("/v1/projects/physics").json()["quota"] == 3
    assert answer(member.put("/v1/projects/physics/quota", json={"quota": 8})) == (
        403,
        error("forbidden", "This needs an admin token."),
    )


def test_project_refusals(api: httpx.Client) -> None:
    assert answer(api.post("/v1/projects", json={"name": "maths"})) == (
        409,
        error("conflict", "Project 'maths' already exists."),
    )
    assert answer(api.post("/v1/projects", json={"name": "Maths!"})) == (
        400,
        error(
            "invalid",
            "'Maths!' is not a project name; use lower-case letters, digits, '.', '_' and '-'.",
        ),
    )
    assert answer(api.post("/v1/projects", json={"name": "chemistry", "quota": -1})) == (
        400,
        error("invalid", "A quota is a number of devices, 0 or more."),
    )
    assert answer(api.get("/v1/projects/chemistry")) == (
        404,
        error(
            "not-found",
            "There is no project 'chemistry'; create it with `akka training projects create "
            "chemistry`.",
        ),
    )
