"""What a reinforcement stage hands to a later stage that trains on ``@STAGE``: a dataset of the
best completion of each prompt it scored (a score above zero), as chat rows. It is registered
like any dataset, as ``PROJECT/<pipeline>-<stage>``, so the later run pins it by hash."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, TypedDict

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.core.errors import InvalidRequest
from akka_training.deployment.context import AppContext
from akka_training.rewards.rollouts import Rollout, read_step_file
from akka_training.server.auth import Principal
from akka_training.server.services.datasets import register_dataset
from akka_training.storage.models import RolloutStep, Run

CONTROLLER = Principal("controller", "controller", "admin", None)


class ChatRow(TypedDict):
    """A row of the dataset a stage hands on: its prompt's messages and the best completion."""

    messages: list[dict[str, Any]]


def stage_output_dataset(
    session: Session, ctx: AppContext, pipeline_id: str, stage: str, run: Run
) -> str:
    """Register the dataset `run` (a completed reinforcement stage) produced; its reference."""
    rows = best_completions(session, ctx, run)
    if not rows:
        raise InvalidRequest(
            f"stage {stage} (run {run.id}) scored no completion above zero, so it produced no rows "
            "for the next stage"
        )
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    name = f"{pipeline_id}-{stage}"

    async def chunks() -> AsyncIterator[bytes]:
        yield body

    result = asyncio.run(
        register_dataset(ctx, CONTROLLER, run.project, name, None, chunks(), len(body))
    )
    return f"{run.project}/{name}:v{result.version}"


def best_completions(session: Session, ctx: AppContext, run: Run) -> list[ChatRow]:
    rows: list[ChatRow] = []
    files = session.scalars(
        select(RolloutStep.blob).where(RolloutStep.run_id == run.id).order_by(RolloutStep.step)
    ).all()
    for blob in files:
        best: dict[int, Rollout] = {}
        for rollout in read_step_file(ctx.blobs.get_bytes(blob)):
            kept = best.get(rollout.group)
            if rollout.score > 0 and (kept is None or rollout.score > kept.score):
                best[rollout.group] = rollout
        for rollout in best.values():
            prompt = rollout.prompt
            messages = (
                prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
            )
            rows.append(
                {"messages": [*messages, {"role": "assistant", "content": rollout.completion}]}
            )
    return rows
