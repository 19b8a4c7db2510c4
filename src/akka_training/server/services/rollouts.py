"""Reading the rollouts a reinforcement run kept: one step at a time, from its step file."""

from __future__ import annotations

from sqlalchemy import desc, select
from sqlalchemy.orm import Session

from akka_training.api.rollouts import Rollout, StepRollouts
from akka_training.core.errors import InvalidRequest, NotFound
from akka_training.core.plans import RL_METHODS
from akka_training.deployment.context import AppContext
from akka_training.rewards import rollouts as kept
from akka_training.rewards.rollouts import read_step_file
from akka_training.server.auth import Principal
from akka_training.server.services.lookups import run_for
from akka_training.storage.models import RolloutStep

MAX_ROLLOUTS = 200


def rollouts(
    session: Session,
    ctx: AppContext,
    principal: Principal,
    run_ref: str,
    step: int | None,
    order: str | None,
    limit: int | None,
) -> StepRollouts:
    run = run_for(session, principal, run_ref)
    if order not in (None, "worst", "best"):
        raise InvalidRequest("order is worst or best.")
    limit = min(limit or MAX_ROLLOUTS, MAX_ROLLOUTS)
    steps = session.scalars(
        select(RolloutStep.step).where(RolloutStep.run_id == run.id).order_by(RolloutStep.step)
    ).all()
    if not steps:
        if run.method not in RL_METHODS:
            note = f"Run {run.id} is a {run.method} run: only grpo and gspo runs keep rollouts."
        else:
            note = f"Run {run.id} has no rollouts: it has kept none yet, or it trained on a version that did not keep them."
        return StepRollouts(
            run=run.id,
            method=run.method,
            steps=[],
            step=None,
            count=0,
            order=None,
            best=None,
            worst=None,
            rollouts=[],
            note=note,
        )
    if step is None:
        row = session.scalar(
            select(RolloutStep)
            .where(RolloutStep.run_id == run.id)
            .order_by(desc(RolloutStep.step))
            .limit(1)
        )
    else:
        row = session.get(RolloutStep, (run.id, step))
    if row is None:
        raise NotFound(
            f"Run {run.id} kept no rollouts at step {step}; steps with rollouts: {_ranges(list(steps))}."
        )
    # A store on this host gives a path: the reader maps the file and decodes only the columns
    # and row groups it needs, instead of reading every byte of the step first.
    source = ctx.blobs.local_path(row.blob) or ctx.blobs.get_bytes(row.blob)
    records = read_step_file(source, order=order, limit=limit)  # type: ignore[arg-type]
    return StepRollouts(
        run=run.id,
        method=run.method,
        steps=list(steps),
        step=row.step,
        count=row.count,
        order=order,
        best=row.best_score,
        worst=row.worst_score,
        rollouts=[_rollout(r) for r in records],
    )


def _rollout(r: kept.Rollout) -> Rollout:
    return Rollout(
        step=r.step,
        index=r.index,
        group=r.group,
        prompt=r.prompt,
        completion=r.completion,
        expected=r.expected,
        score=r.score,
        shares=r.shares,
        values=r.values,
        completion_tokens=r.completion_tokens,
        finish_reason=r.finish_reason,
        tool_calls=r.tool_calls,
        tool_failures=r.tool_failures,
        failures=r.failures,
        explanations=r.explanations,
        weights=r.weights,
    )


def _ranges(steps: list[int]) -> str:
    if not steps:
        return "none"
    out = []
    start = prev = steps[0]
    for s in [*steps[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(out)
