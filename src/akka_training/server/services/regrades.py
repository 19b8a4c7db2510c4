"""Regrades: a run's kept rollouts scored again with another reward definition. The service
checks the request (the run, its steps with rollouts, the reward, its bundles pinned) and
submits a regrade task (`core.tasks.REGRADE`); the scoring runs on the cluster, never here.
The run itself is only read."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.api.tasks import TaskRecord
from akka_training.core.errors import Conflict, InvalidRequest, PlanRefused, Problem
from akka_training.core.parsing import problems_of, salvage
from akka_training.core.plans import RL_METHODS, Reward, RuleTerm
from akka_training.core.resolved import BundlePin
from akka_training.core.tasks import REGRADE, RegradeParams, RegradeSource
from akka_training.server.auth import Principal
from akka_training.server.services import tasks
from akka_training.server.services.lookups import run_for
from akka_training.server.services.plans import pin_bundles
from akka_training.server.services.rollouts import _ranges
from akka_training.storage.models import RolloutStep


def start(
    session: Session,
    principal: Principal,
    run_ref: str,
    reward_document: dict[str, Any],
    from_step: int | None,
    to_step: int | None,
) -> TaskRecord:
    """Submit a regrade of the run's kept rollouts (steps `from_step` to `to_step`, both
    included; all when None); the task."""
    run = run_for(session, principal, run_ref)
    if from_step is not None and to_step is not None and from_step > to_step:
        raise InvalidRequest(
            f"The steps {from_step}-{to_step} are no range: give the first step first "
            f"(--steps {to_step}-{from_step})."
        )
    rows = session.scalars(
        select(RolloutStep).where(RolloutStep.run_id == run.id).order_by(RolloutStep.step)
    ).all()
    if not rows:
        if run.method not in RL_METHODS:
            raise Conflict(
                f"Run {run.id} is a {run.method} run: it kept no rollouts to regrade (only grpo "
                "and gspo runs keep them)."
            )
        raise Conflict(
            f"Run {run.id} has kept no rollouts yet, so there is nothing to regrade: wait for "
            "its first step, or regrade another run."
        )
    picked = [
        r
        for r in rows
        if (from_step is None or r.step >= from_step) and (to_step is None or r.step <= to_step)
    ]
    if not picked:
        asked = (
            f"{from_step if from_step is not None else ''}-{to_step if to_step is not None else ''}"
        )
        raise InvalidRequest(
            f"Run {run.id} kept no rollouts in steps {asked}; steps with rollouts: "
            f"{_ranges([r.step for r in rows])}."
        )
    reward, bundles = _reward(session, principal, reward_document)
    params = RegradeParams(
        reward=reward,
        bundles=bundles,
        steps=[RegradeSource(step=r.step, blob=r.blob) for r in picked],
    )
    task = tasks.submit(
        session,
        kind=REGRADE,
        project=run.project,
        pool=run.pool,
        params=params.to_json(),
        run_id=run.id,
    )
    return tasks.task_record(task)


def _reward(
    session: Session, principal: Principal, document: dict[str, Any]
) -> tuple[Reward, dict[str, BundlePin]]:
    """The reward, with every problem at once (its schema's, the rules' over the document as
    written, its rule terms' bundles); its rule terms' bundles pinned."""
    problems: list[Problem] = []
    try:
        reward: Reward | None = Reward.model_validate(document)
    except ValidationError as exc:
        problems += problems_of(exc, Reward)
        reward, _ = salvage(Reward, document)
    written = document.get("terms")
    terms = written if isinstance(written, list) else []
    if not terms and not any(p.field == "terms" for p in problems):
        problems.append(
            Problem(
                "terms",
                "The reward has no terms: add at least one under terms (for example "
                "{name: correct, kind: match, mode: exact}).",
            )
        )
    counts = Counter(
        t["name"] for t in terms if isinstance(t, dict) and isinstance(t.get("name"), str)
    )
    twice = sorted(n for n, c in counts.items() if c > 1)
    if twice:
        problems.append(
            Problem(
                "terms", f"Term names must be unique; {', '.join(twice)} appear more than once."
            )
        )
    problems += _patterns(terms)
    users = [
        (f"terms[{i}].bundle", term)
        for i, term in enumerate(reward.terms if reward is not None else [])
        if isinstance(term, RuleTerm)
    ]
    pins = pin_bundles(session, principal, users, problems)
    if problems or reward is None:
        raise PlanRefused(problems, what="reward")
    return reward, pins


def _patterns(terms: list[Any]) -> list[Problem]:
    """A regex term's pattern must compile (as a run plan's must)."""
    out = []
    for i, term in enumerate(terms):
        if not isinstance(term, dict) or term.get("kind") != "regex":
            continue
        pattern = term.get("pattern")
        if not isinstance(pattern, str):
            continue
        try:
            re.compile(pattern)
        except re.error as exc:
            out.append(
                Problem(
                    f"terms[{i}].pattern",
                    f"terms[{i}].pattern {pattern!r} is not a valid regular expression ({exc}); "
                    "fix the pattern.",
                )
            )
    return out
