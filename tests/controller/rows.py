"""Rows for the controller's tests: a run as the request path stores it (with resolved settings),
its claim, attempts, snapshots, steps and rollout steps, written straight to the database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from akka_training.core.blobkeys import rollouts_key, snapshot_keys
from akka_training.core.phases import Phase
from akka_training.core.plans import Execution, RunConfig
from akka_training.core.resolved import BaseModelPin, DatasetPin, Settings
from akka_training.core.states import AttemptOutcome, AttemptState, ClaimState
from akka_training.storage.models import (
    Attempt,
    Claim,
    Project,
    RolloutStep,
    Run,
    Snapshot,
    Step,
)

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def settings_json(base_model: str = "tiny-chat", **execution: Any) -> dict[str, Any]:
    """Resolved settings of an sft run on `base_model` (a development model's id)."""
    dataset = DatasetPin(
        ref="maths/train",
        name="maths/train",
        version=1,
        sha256="a" * 64,
        rows=40,
        bytes=4000,
        format="chat",
        has_images=False,
        blob=f"datasets/sha256/{'a' * 64}.jsonl",
    )
    settings = Settings(
        project="maths",
        method="sft",
        engine="trl",
        base_model=BaseModelPin(
            id=base_model,
            path=f"/models/{base_model}",
            revision="rev-1",
            modality="text",
            context_length=2048,
        ),
        dataset=dataset,
        config=RunConfig.model_validate(
            {"dataset": f"maths/train@sha256:{'a' * 64}", "method": "sft"}
        ),
        execution=Execution.model_validate({"pool": "default", **execution}),
    )
    return settings.to_json()


def add_run(
    session: Session,
    run_id: str = "r1",
    *,
    phase: Phase = Phase.TRAINING,
    attempt: int = 0,
    project: str = "maths",
    source: tuple[str, str] | None = None,
    **execution: Any,
) -> Run:
    """A run in `phase` (since T0), of `project` (created when missing), on pool `default`."""
    if session.get(Project, project) is None:
        session.add(Project(name=project))
        session.flush()
    run = Run(
        id=run_id,
        project=project,
        method="sft",
        engine="trl",
        base_model="tiny-chat",
        dataset="maths/train:v1",
        pool="default",
        gpus=1,
        plan={"kind": "run"},
        settings=settings_json(**execution),
        source_run=source[0] if source else None,
        source_snapshot=source[1] if source else None,
        source_kind="branch" if source else None,
        phase=phase.value,
        phase_since=T0,
        phase_seconds={},
        attempt=attempt,
        created_at=T0,
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )
    session.add(run)
    session.flush()
    return run


def add_claim(
    session: Session, run: Run, state: ClaimState = ClaimState.GRANTED, granted_at: datetime = T0
) -> Claim:
    claim = Claim(
        run_id=run.id,
        project=run.project,
        pool=run.pool,
        devices=run.gpus,
        device_ids=[0] if state == ClaimState.GRANTED else [],
        state=state,
        created_at=T0,
        granted_at=granted_at if state == ClaimState.GRANTED else None,
    )
    session.add(claim)
    session.flush()
    return claim


def add_attempt(
    session: Session,
    run: Run,
    number: int,
    state: AttemptState = AttemptState.LAUNCHED,
    resume_snapshot: str | None = None,
    outcome: AttemptOutcome | None = None,
) -> Attempt:
    """Attempt `number` of `run` in `state`, ended with `outcome` (as its job reported it, or
    the controller found it)."""
    attempt = Attempt(
        run_id=run.id,
        number=number,
        state=state,
        outcome=outcome,
        handle={"pid": 4242} if state != AttemptState.PENDING else None,
        resume_snapshot=resume_snapshot,
        created_at=T0,
    )
    session.add(attempt)
    run.attempt = max(run.attempt, number)
    session.flush()
    return attempt


def add_snapshot(
    session: Session, run_id: str, step: int, attempt: int = 1, training_state: bool = True
) -> Snapshot:
    keys = snapshot_keys(run_id, step)
    snapshot = Snapshot(
        run_id=run_id,
        name=keys.name,
        step=step,
        attempt=attempt,
        weights=keys.weights,
        training_state=keys.training_state if training_state else None,
        created_at=T0,
    )
    session.add(snapshot)
    return snapshot


def add_steps_and_rollouts(session: Session, run_id: str, steps: range, attempt: int = 1) -> None:
    for step in steps:
        session.add(Step(run_id=run_id, step=step, attempt=attempt, metrics={"loss": 1.0 / step}))
        session.add(RolloutStep(run_id=run_id, step=step, blob=rollouts_key(run_id, step), count=8))
