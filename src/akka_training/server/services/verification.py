"""`runs verify`: each step's published figures recomputed from the rollouts the run kept
(`rewards.figures.step_figures`, the definitions the engines publish by) and compared."""

from __future__ import annotations

import math

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.api.verification import FigureDifference, RunVerification, VerifiedStep
from akka_training.core.errors import InvalidRequest
from akka_training.core.plans import RL_METHODS, RlHyperparams
from akka_training.core.resolved import Settings
from akka_training.deployment.context import AppContext
from akka_training.rewards.figures import step_figures
from akka_training.rewards.rollouts import read_step_file
from akka_training.server.auth import Principal
from akka_training.server.services.lookups import run_for
from akka_training.storage.models import RolloutStep, Step

# Published figures are floats that went through JSON: equal within float rounding.
RELATIVE = 1e-6
ABSOLUTE = 1e-9


def verify(
    session: Session, ctx: AppContext, principal: Principal, run_ref: str
) -> RunVerification:
    run = run_for(session, principal, run_ref)
    if run.method not in RL_METHODS:
        raise InvalidRequest(
            f"Run {run.id} is a {run.method} run: only grpo and gspo runs keep rollouts to "
            "verify their figures against."
        )
    rl = Settings.model_validate(run.settings).config.rl_hyperparams or RlHyperparams()
    published = {
        row.step: row.metrics for row in session.scalars(select(Step).where(Step.run_id == run.id))
    }
    kept = session.scalars(
        select(RolloutStep).where(RolloutStep.run_id == run.id).order_by(RolloutStep.step)
    ).all()
    steps: list[VerifiedStep] = []
    differences: list[FigureDifference] = []
    for row in kept:
        rollouts = read_step_file(ctx.blobs.get_bytes(row.blob))
        recomputed = step_figures(rollouts, rl.generations_per_prompt, rl.max_completion_tokens)
        shown = published.get(row.step) or {}
        compared = 0
        for name, value in sorted(recomputed.items()):
            figure = shown.get(name)
            if not isinstance(figure, int | float):
                differences.append(_difference(row.step, name, None, value))
                continue
            compared += 1
            if not math.isclose(float(figure), value, rel_tol=RELATIVE, abs_tol=ABSOLUTE):
                differences.append(_difference(row.step, name, float(figure), value))
        steps.append(VerifiedStep(step=row.step, rollouts=len(rollouts), figures=compared))
    return RunVerification(run=run.id, steps=steps, differences=differences)


def _difference(
    step: int, figure: str, published: float | None, recomputed: float | None
) -> FigureDifference:
    return FigureDifference(step=step, figure=figure, published=published, recomputed=recomputed)
