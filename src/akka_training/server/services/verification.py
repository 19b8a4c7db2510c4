"""`runs verify`: a run's published step figures checked against the rollouts it kept, and
those rollouts against its reward. The service picks the steps whose report and rollouts are
both in (a run still training has a newest step with one and not yet the other) and submits a
verify task (`core.tasks.VERIFY`): the counting and the scoring run on the cluster, never here
(a rule term is the project's code). The run itself is only read."""

from __future__ import annotations

import math

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.api.tasks import TaskRecord
from akka_training.core import blobkeys
from akka_training.core.errors import Conflict, InvalidRequest
from akka_training.core.plans import RL_METHODS, Monitors, Reward, RlHyperparams
from akka_training.core.resolved import Settings
from akka_training.core.tasks import VERIFY, VerifyParams, VerifySource
from akka_training.rewards.health import correctness_term
from akka_training.server.auth import Principal
from akka_training.server.services import tasks
from akka_training.server.services.lookups import run_for
from akka_training.storage.models import RolloutStep, Step


def start(session: Session, principal: Principal, run_ref: str) -> TaskRecord:
    """Submit the verification of every step of the run whose report and rollouts are both
    in; the task."""
    run = run_for(session, principal, run_ref)
    if run.method not in RL_METHODS:
        raise InvalidRequest(
            f"Run {run.id} is a {run.method} run: only grpo and gspo runs keep rollouts to "
            "verify their figures against."
        )
    reports = {row.step: row for row in session.scalars(select(Step).where(Step.run_id == run.id))}
    kept = session.scalars(
        select(RolloutStep).where(RolloutStep.run_id == run.id).order_by(RolloutStep.step)
    ).all()
    both = [r for r in kept if r.step in reports]
    if not both:
        raise Conflict(
            f"Run {run.id} has no step whose report and rollouts are both in yet, so there is "
            "nothing to verify: wait for its first step."
        )
    settings = Settings.model_validate(run.settings)
    config = settings.config
    rl = config.rl_hyperparams or RlHyperparams()
    reward = config.reward or Reward()
    monitors = config.monitors or Monitors()
    sources = [
        VerifySource(
            step=r.step,
            attempt=reports[r.step].attempt,
            blob=r.blob,
            published=_finite(reports[r.step].metrics),
        )
        for r in both
    ]
    params = VerifyParams(
        reward=reward,
        bundles=settings.bundles,
        engine=settings.engine,
        generations_per_prompt=rl.generations_per_prompt,
        max_completion_tokens=rl.max_completion_tokens,
        baseline_steps=monitors.baseline_steps,
        correctness_term=correctness_term(monitors, reward),
        tokenizer=blobkeys.tokenizer_prefix(run.id),
        base_model=settings.base_model,
        tools=bool(config.tools),
        # One attempt's steps after another's: each attempt starts its own baseline.
        steps=sorted(sources, key=lambda s: (s.attempt, s.step)),
    )
    task = tasks.submit(
        session,
        kind=VERIFY,
        project=run.project,
        pool=run.pool,
        params=params.to_json(),
        run_id=run.id,
    )
    return tasks.task_record(task)


def _finite(metrics: dict[str, object]) -> dict[str, float]:
    """The step's figures that are finite numbers (a non-finite one is kept as its text)."""
    return {
        name: float(value)
        for name, value in metrics.items()
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    }
