"""`AsyncTrainerClient`: an async twin of every public call of `TrainerClient`, with the same
parameters and overloads, generated and kept current; and a round trip through the real app in
this process."""

from __future__ import annotations

import asyncio
import inspect
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

from akka_training.api.runs import DryRun, RunEndLine, RunRecord
from akka_training.client import AsyncTrainerClient, TrainerClient, aio
from akka_training.core.errors import NotFound, PlanRefused
from akka_training.testing.app import BASE_URL, InProcessTrainer
from tests.server.routers.helpers import chat_rows, sft_plan

GENERATED = Path(aio.__file__).with_name("async_trainer.py")


def public(cls: type) -> dict[str, typing.Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_every_public_call_has_an_async_twin_with_the_same_parameters() -> None:
    calls = public(TrainerClient)
    twins = public(AsyncTrainerClient)
    assert len(calls) >= 60
    assert sorted(calls) == sorted(twins)
    for name, call in calls.items():
        twin = twins[name]
        ours, theirs = inspect.signature(call), inspect.signature(twin)
        assert list(ours.parameters.values()) == list(theirs.parameters.values()), name
        answer = ours.return_annotation
        if answer.startswith("Iterator["):
            assert inspect.isasyncgenfunction(twin), name
            assert theirs.return_annotation == "Async" + answer, name
        else:
            assert inspect.iscoroutinefunction(twin), name
            assert theirs.return_annotation == answer, name
        overloads = [inspect.signature(f) for f in typing.get_overloads(call)]
        assert [(list(s.parameters.values()), s.return_annotation) for s in overloads] == [
            (list(s.parameters.values()), s.return_annotation)
            for s in map(inspect.signature, typing.get_overloads(twin))
        ], name


def test_the_generated_twins_are_current() -> None:
    """A call added to `TrainerClient` fails here until the twins are generated again:
    ``python -m akka_training.client.aio > src/akka_training/client/async_trainer.py``."""
    assert GENERATED.read_text() == aio.render()


@pytest.fixture
def trainer(in_process_factory: Callable[..., InProcessTrainer]) -> InProcessTrainer:
    return in_process_factory({"trainer": {"projects": [{"name": "maths", "quota": 2}]}})


def async_client_of(trainer: InProcessTrainer) -> AsyncTrainerClient:
    client = TrainerClient(BASE_URL, trainer.admin_token)
    client._http = trainer.client()  # the real client, over the app in this process
    return AsyncTrainerClient.wrapping(client)


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_round_trip_through_the_async_client(trainer: InProcessTrainer) -> None:
    async def main() -> None:
        async with async_client_of(trainer) as client:
            registered = await client.register_dataset(
                "maths/train", iter([chat_rows(6), chat_rows(6, offset=6)])
            )
            assert (registered.ref, registered.rows, registered.created) == (
                "maths/train:v1",
                12,
                True,
            )
            checked = await client.start_run(sft_plan(), dry_run=True)
            assert isinstance(checked, DryRun)
            assert checked.settings["dataset"]["sha256"] == registered.sha256
            # Calls run side by side without blocking the loop.
            started, info = await asyncio.gather(client.start_run(sft_plan()), client.info())
            assert isinstance(started, RunRecord) and started.phase == "QUEUED"
            assert info.engine
            runs = await client.runs(project="maths")
            assert [r.id for r in runs] == [started.id]
            assert (await client.run(started.id[:6])).id == started.id
            lines = [line async for line in client.wait_run(started.id, timeout=0)]
            assert isinstance(lines[-1], RunEndLine) and lines[-1].run.id == started.id
            cancelled = await client.cancel_run(started.id)
            assert cancelled.phase == "CANCELLED"
            with pytest.raises(NotFound, match=r"^There is no run 'ffffffffffff'\.$"):
                await client.run("ffffffffffff")
            with pytest.raises(PlanRefused) as refused:
                await client.start_run(sft_plan(config={"dataset": "maths/nope"}))
            assert [p.field for p in refused.value.problems] == ["config.dataset"]

    asyncio.run(main())
