"""Datasets through the real app: register, read by every kind of reference, versions, aliases,
and each refusal with its words."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, error, register


def test_register_then_read_by_version_alias_and_hash(api: httpx.Client) -> None:
    first = register(api, "maths/train", chat_rows(3))
    again = api.post("/v1/datasets/maths/train", content=chat_rows(3))
    second = register(api, "maths/train", chat_rows(5, offset=3), alias="prod")

    assert {k: first[k] for k in ("ref", "version", "rows", "format", "hasImages", "created")} == {
        "ref": "maths/train:v1",
        "version": 1,
        "rows": 3,
        "format": "chat",
        "hasImages": False,
        "created": True,
    }
    # The same content registers once: 200, the version that holds it.
    assert again.status_code == 200
    assert (again.json()["ref"], again.json()["created"]) == ("maths/train:v1", False)
    assert (second["ref"], second["alias"], second["previous"]) == ("maths/train:v2", "prod", None)

    def ref_of(path: str) -> str:
        response = api.get(f"/v1/datasets/maths/{path}")
        assert response.status_code == 200, response.text
        ref: str = response.json()["ref"]
        return ref

    assert ref_of("train") == "maths/train:v2"
    assert ref_of("train:v1") == "maths/train:v1"
    assert ref_of("train:prod") == "maths/train:v2"
    assert ref_of(f"train@sha256:{first['sha256'][:8]}") == "maths/train:v1"
    detail = api.get("/v1/datasets/maths/train").json()
    assert [(v["ref"], v["latest"], v["aliases"]) for v in detail["versions"]] == [
        ("maths/train:v1", False, []),
        ("maths/train:v2", True, ["prod"]),
    ]
    assert api.get("/v1/datasets/maths/train/versions").json() == detail["versions"]


def test_an_alias_moves_and_the_listing_shows_the_newest_version(api: httpx.Client) -> None:
    register(api, "maths/train", chat_rows(3), alias="prod")
    register(api, "maths/train", chat_rows(4, offset=3))
    register(api, "maths/eval", chat_rows(2, offset=10))

    moved = api.put("/v1/datasets/maths/train:v2/aliases/prod").json()

    assert (moved["ref"], moved["alias"], moved["previous"]) == ("maths/train:v2", "prod", 1)
    listed = api.get("/v1/datasets", params={"project": "maths"}).json()
    assert [
        (d["dataset"], d["latest"], d["versions"], d["rows"], d["aliases"]) for d in listed
    ] == [
        ("maths/eval", 1, 1, 2, {}),
        ("maths/train", 2, 2, 4, {"prod": 2}),
    ]


def test_references_that_name_nothing_say_what_exists(api: httpx.Client) -> None:
    register(api, "maths/train", chat_rows(3))
    register(api, "maths/train", chat_rows(3, offset=3), alias="prod")

    assert answer(api.get("/v1/datasets/maths/train:v9")) == (
        404,
        error("not-found", "maths/train has no v9; its versions: v1, v2."),
    )
    assert answer(api.get("/v1/datasets/maths/train:best")) == (
        404,
        error("not-found", "maths/train has no alias 'best'; its aliases: prod (v2)."),
    )
    assert answer(api.get("/v1/datasets/maths/test")) == (
        404,
        error("not-found", "There is no dataset maths/test; datasets in maths: train."),
    )
    assert answer(api.get("/v1/datasets/maths/Train")) == (
        400,
        error(
            "invalid",
            "'maths/Train' is not a reference; write PROJECT/NAME, PROJECT/NAME:vN, "
            "PROJECT/NAME:ALIAS or PROJECT/NAME@sha256:HASH (lower-case letters, digits, '.', "
            "'_' and '-')",
        ),
    )


def test_registrations_refused_before_a_byte_is_kept(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    assert answer(api.post("/v1/datasets/physics/waves", content=chat_rows(1))) == (
        404,
        error(
            "not-found",
            "There is no project 'physics'; create it with `akka training projects create "
            "physics`.",
        ),
    )
    assert answer(api.post("/v1/datasets/maths/Train!", content=chat_rows(1))) == (
        400,
        error(
            "invalid",
            "'Train!' is not a dataset name; use lower-case letters, digits, '.', '_' and '-'.",
        ),
    )
    assert answer(
        api.post("/v1/datasets/maths/train", content=chat_rows(1), params={"alias": "v3"})
    ) == (
        400,
        error(
            "invalid",
            "'v3' cannot be an alias: it reads as a version number; choose a name such as prod or "
            "best.",
        ),
    )
    assert answer(api.post("/v1/datasets/maths/train", content=b"")) == (
        422,
        error(
            "invalid",
            "The file holds no rows; a dataset is JSON Lines, one chat or prompt-completion row "
            "per line.",
        ),
    )
    broken = b'{"messages": [{"role": "user", "content": "q"}]}\nnot json\n'
    assert answer(api.post("/v1/datasets/maths/train", content=broken)) == (
        422,
        error(
            "invalid",
            "The file was refused (2 problems):\n"
            "  - line 1: messages ends with a user message; training needs the assistant's "
            "answer as the last message\n"
            "  - line 2: is not valid JSON: Expecting value (column 1)",
            [
                {
                    "field": "line 1 messages",
                    "message": "line 1: messages ends with a user message; training needs the "
                    "assistant's answer as the last message",
                },
                {
                    "field": "line 2",
                    "message": "line 2: is not valid JSON: Expecting value (column 1)",
                },
            ],
        ),
    )
    assert api.get("/v1/datasets").json() == []
    assert trainer.ctx.blobs.list("datasets") == []


def test_an_upload_over_the_limit_is_refused_with_the_limit(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory(
        {"trainer": {"datasets": {"max-bytes": 1024}, "projects": [{"name": "maths"}]}}
    )

    refused = trainer.client().post("/v1/datasets/maths/train", content=chat_rows(40))

    assert answer(refused) == (
        413,
        error(
            "too-large",
            "The upload is larger than this trainer's limit of 1 KiB (trainer.datasets.max-bytes); "
            "split the file or ask the operator to raise trainer.datasets.max-bytes.",
        ),
    )
    assert refused.headers["connection"] == "close"
    assert trainer.ctx.blobs.list("datasets") == []
