"""Sweeping old snapshots, on SQLite and Postgres with a real local blob store: what is kept, what
is deleted, and that the rows stay readable."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select

from akka_training.controller.sweep import sweep_snapshots
from akka_training.core.blobkeys import snapshot_keys
from akka_training.core.phases import Phase
from akka_training.storage.models import Snapshot
from akka_training.testing.app import InProcessTrainer
from tests.controller.rows import add_run, add_snapshot


def snapshots_with_blobs(trainer: InProcessTrainer, run_id: str, steps: range) -> None:
    with trainer.ctx.db.session() as session:
        for step in steps:
            add_snapshot(session, run_id, step)
    for step in steps:
        keys = snapshot_keys(run_id, step)
        trainer.ctx.blobs.put_bytes(f"{keys.weights}adapter_model.safetensors", b"weights")
        trainer.ctx.blobs.put_bytes(f"{keys.training_state}optimizer.pt", b"state")


def kept(trainer: InProcessTrainer, run_id: str) -> tuple[list[int], list[int]]:
    """The steps of `run_id`'s unswept snapshot rows, and of the snapshots whose blobs exist."""
    with trainer.ctx.db.session() as session:
        rows = session.scalars(
            select(Snapshot).where(Snapshot.run_id == run_id).order_by(Snapshot.step)
        ).all()
        unswept = [s.step for s in rows if s.swept_at is None]
        steps = [s.step for s in rows]
    blobs = trainer.ctx.blobs
    stored = [
        step
        for step in steps
        if blobs.exists(snapshot_keys(run_id, step).weights)
        and blobs.exists(snapshot_keys(run_id, step).training_state)
    ]
    return unswept, stored


def test_snapshots_past_keep_adapters_are_swept_except_one_another_run_starts_from(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory()
    with trainer.ctx.db.session() as session:
        add_run(session, "r1", phase=Phase.COMPLETED, keepAdapters=2)
        add_run(session, "r2", phase=Phase.QUEUED, source=("r1", "step-1"))
    snapshots_with_blobs(trainer, "r1", range(1, 6))

    swept = sweep_snapshots(trainer.ctx)

    assert swept == ["r1/step-3", "r1/step-2"]
    assert kept(trainer, "r1") == ([1, 4, 5], [1, 4, 5])
    # The rows stay, marked, so the run's history reads the same.
    listed = trainer.client().get("/v1/runs/r1/snapshots").json()
    assert [(s["name"], s["swept"]) for s in listed] == [
        ("step-1", False),
        ("step-2", True),
        ("step-3", True),
        ("step-4", False),
        ("step-5", False),
    ]
    assert sweep_snapshots(trainer.ctx) == []


def test_the_newest_snapshot_is_never_swept(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory()
    with trainer.ctx.db.session() as session:
        add_run(session, "r1", keepAdapters=1)
    snapshots_with_blobs(trainer, "r1", range(1, 4))

    assert sweep_snapshots(trainer.ctx) == ["r1/step-2", "r1/step-1"]
    assert kept(trainer, "r1") == ([3], [3])

    # The next snapshot the job reports becomes the newest; the one before goes.
    snapshots_with_blobs(trainer, "r1", range(4, 5))
    assert sweep_snapshots(trainer.ctx) == ["r1/step-3"]
    assert kept(trainer, "r1") == ([4], [4])


def test_each_run_keeps_its_own_number_and_four_without_one(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory()
    with trainer.ctx.db.session() as session:
        add_run(session, "r1", keepAdapters=3)
        # Settings that predate keepAdapters keep the default, four.
        legacy = add_run(session, "r2")
        legacy.settings = {k: v for k, v in legacy.settings.items() if k != "execution"}
    snapshots_with_blobs(trainer, "r1", range(1, 6))
    snapshots_with_blobs(trainer, "r2", range(1, 6))

    assert sorted(sweep_snapshots(trainer.ctx)) == ["r1/step-1", "r1/step-2", "r2/step-1"]
    assert kept(trainer, "r1") == ([3, 4, 5], [3, 4, 5])
    assert kept(trainer, "r2") == ([2, 3, 4, 5], [2, 3, 4, 5])


def test_a_snapshot_a_dpo_run_measures_against_is_kept(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    """A continuation of a dpo run branched from r1's step-1 keeps step-1 as its reference,
    though it starts from another run's snapshot: step-1 stays for it."""
    trainer = in_process_factory()
    with trainer.ctx.db.session() as session:
        add_run(session, "r1", phase=Phase.COMPLETED, keepAdapters=1)
        continued = add_run(session, "r3", phase=Phase.QUEUED)
        continued.method = "dpo"
        continued.settings = {
            **continued.settings,
            "reference": {
                "kind": "adapter",
                "run": "r1",
                "snapshot": "step-1",
                "weights": snapshot_keys("r1", 1).weights,
            },
        }
    snapshots_with_blobs(trainer, "r1", range(1, 4))

    assert sweep_snapshots(trainer.ctx) == ["r1/step-2"]
    assert kept(trainer, "r1") == ([1, 3], [1, 3])
