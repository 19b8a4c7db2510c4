"""The dataset service on SQLite and Postgres: references, concurrent registration, listing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from akka_training.api.datasets import Registered
from akka_training.blobstore import LocalBlobStore
from akka_training.config.settings import Settings
from akka_training.core.errors import Forbidden, InvalidRequest, NotFound
from akka_training.server.auth import Principal
from akka_training.server.services import datasets as service
from akka_training.storage.db import Database
from akka_training.storage.models import DatasetVersion, Project

ADMIN = Principal("t1", "admin", "admin", None)


def chat_rows(answer: str) -> bytes:
    row = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]}
    return (json.dumps(row) + "\n").encode()


async def body(data: bytes) -> AsyncIterator[bytes]:
    yield data


def register(ctx: Any, name: str, data: bytes, alias: str | None = None) -> Registered:
    return asyncio.run(
        service.register_dataset(ctx, ADMIN, "maths", name, alias, body(data), len(data))
    )


@pytest.fixture
def ctx(database: Database, tmp_path: Path) -> Any:
    with database.session() as session:
        session.add(Project(name="maths"))
        session.add(Project(name="physics"))
    # The application context's parts a registration reads (no telemetry: no span).
    return SimpleNamespace(
        db=database, blobs=LocalBlobStore(tmp_path / "blobs"), settings=Settings(), telemetry=None
    )


def test_concurrent_registrations_get_distinct_versions(ctx: Any) -> None:
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: register(ctx, "train", chat_rows(str(i))), range(4)))
    assert sorted(r.version for r in results) == [1, 2, 3, 4]
    # The same content again, at the same time, is one version.
    with ThreadPoolExecutor(3) as pool:
        again = list(pool.map(lambda _: register(ctx, "train", chat_rows("0")), range(3)))
    assert {r.ref for r in again} == {results[0].ref} and not any(r.created for r in again)
    assert ctx.blobs.list("datasets/uploads") == []
    assert len(ctx.blobs.list("datasets/sha256")) == 4


def test_references_resolve_and_say_what_exists(ctx: Any) -> None:
    register(ctx, "train", chat_rows("a"), alias="prod")
    register(ctx, "train", chat_rows("b"))
    with ctx.db.session() as session:
        assert service.resolve_dataset(session, "maths/train", ADMIN).version == 2
        assert service.resolve_dataset(session, "maths/train:v1", ADMIN).version == 1
        assert service.resolve_dataset(session, "maths/train:prod", ADMIN).version == 1
        v2 = service.resolve_dataset(session, "maths/train:v2", ADMIN)
        assert (
            service.resolve_dataset(session, f"maths/train@sha256:{v2.sha256[:6]}", ADMIN)
            is not None
        )
        assert service.version_ref(v2) == "maths/train:v2"
        with pytest.raises(NotFound, match=r"has no v3; its versions: v1, v2\."):
            service.resolve_dataset(session, "maths/train:v3", ADMIN)
        with pytest.raises(NotFound, match=r"has no alias 'best'; its aliases: prod \(v1\)\."):
            service.resolve_dataset(session, "maths/train:best", ADMIN)
        with pytest.raises(InvalidRequest, match="is not a reference"):
            service.resolve_dataset(session, "train", ADMIN)


def test_an_ambiguous_hash_prefix_names_the_candidates(ctx: Any) -> None:
    with ctx.db.session() as session:
        for version, digest in ((1, "abcdef01" + "0" * 56), (2, "abcdef02" + "0" * 56)):
            session.add(
                DatasetVersion(
                    project="maths",
                    name="twin",
                    version=version,
                    sha256=digest,
                    blob=f"datasets/sha256/{digest}.jsonl",
                    bytes=1,
                    rows=1,
                    format="chat",
                )
            )
    with ctx.db.session() as session:
        with pytest.raises(
            InvalidRequest, match=r"matches 2 versions of maths/twin \(v1, v2\); give more"
        ):
            service.resolve_dataset(session, "maths/twin@sha256:abcdef", ADMIN)
        assert service.resolve_dataset(session, "maths/twin@sha256:abcdef02", ADMIN).version == 2


def test_listing_shows_the_newest_version_of_visible_datasets(ctx: Any) -> None:
    register(ctx, "train", chat_rows("a"))
    register(ctx, "train", chat_rows("b"), alias="prod")
    asyncio.run(
        service.register_dataset(ctx, ADMIN, "physics", "waves", None, body(chat_rows("c")), None)
    )
    with ctx.db.session() as session:
        every = service.list_datasets(session, ADMIN, None)
        assert [(d.dataset, d.latest, d.versions, d.aliases) for d in every] == [
            ("maths/train", 2, 2, {"prod": 2}),
            ("physics/waves", 1, 1, {}),
        ]
        physicist = Principal("t2", "ci", "project", ("physics",))
        assert [d.dataset for d in service.list_datasets(session, physicist, None)] == [
            "physics/waves"
        ]
        with pytest.raises(Forbidden):
            service.list_datasets(session, physicist, "maths")
