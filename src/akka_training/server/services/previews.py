"""Reward previews: a plan checked as a dry run, then a preview task (`core.tasks.PREVIEW`)
that scores a few of its dataset's rows with its reward terms on the cluster. A pipeline plan
gets one such task per reinforcement stage whose dataset is registered. Nothing is started and
no device is claimed."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from akka_training.api.pipelines import PipelineDryRun
from akka_training.api.regrades import PipelinePreview, StagePreview
from akka_training.api.runs import DryRun
from akka_training.api.tasks import TaskRecord
from akka_training.core.errors import InvalidRequest
from akka_training.core.parsing import parse_plan
from akka_training.core.plans import RL_METHODS, PipelinePlan, TrainStage
from akka_training.core.resolved import Settings
from akka_training.core.tasks import PREVIEW, PreviewParams
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.services import pipelines, runs, tasks
from akka_training.storage.models import Task


def start(
    session: Session, ctx: AppContext, principal: Principal, document: dict[str, Any], rows: int
) -> TaskRecord:
    checked = runs.start(session, ctx, principal, document, dry_run=True)
    assert isinstance(checked, DryRun)
    settings = Settings.model_validate(checked.settings)
    reward = settings.config.reward
    if reward is None or not reward.terms:
        raise InvalidRequest(
            f"A {settings.method} plan has no reward terms to preview: --preview scores the "
            "reward of a grpo or gspo plan."
        )
    return tasks.task_record(_submit(session, ctx, settings, rows))


def start_pipeline(
    session: Session, ctx: AppContext, principal: Principal, document: dict[str, Any], rows: int
) -> PipelinePreview:
    """Check the pipeline as a dry run, then one preview task per grpo or gspo stage whose
    settings resolve (its dataset is registered); the other train stages say why they are not
    previewed. Refused when no stage can be."""
    checked = pipelines.start(session, ctx, principal, document, dry_run=True)
    assert isinstance(checked, PipelineDryRun)
    plan = parse_plan(document)  # it parsed in the dry run
    assert isinstance(plan, PipelinePlan)
    methods = {s.name: s.config.method for s in plan.stages if isinstance(s, TrainStage)}
    stages: list[StagePreview] = []
    for stage in checked.stages:
        if stage.type != "train":
            continue
        method = methods[stage.name]
        entry = StagePreview(name=stage.name, method=method)
        if method not in RL_METHODS:
            entry.omitted = f"is a {method} stage: it has no reward terms"
        elif stage.settings is None:
            entry.omitted = stage.omitted or "has no registered dataset to resolve"
        else:
            settings = Settings.model_validate(stage.settings)
            if settings.config.reward is None or not settings.config.reward.terms:
                entry.omitted = "has no reward terms"
            else:
                entry.task = tasks.task_record(_submit(session, ctx, settings, rows))
        stages.append(entry)
    if not any(s.task is not None for s in stages):
        reasons = "; ".join(f"stage {s.name} {s.omitted}" for s in stages)
        raise InvalidRequest(
            "The pipeline has no grpo or gspo stage to preview: --preview scores the reward of "
            f"a reinforcement stage whose dataset is registered ({reasons})."
        )
    return PipelinePreview(stages=stages)


def _submit(session: Session, ctx: AppContext, settings: Settings, rows: int) -> Task:
    reward = settings.config.reward
    assert reward is not None
    params = PreviewParams(
        reward=reward,
        bundles=settings.bundles,
        dataset=settings.dataset.blob,
        rows=rows,
        settings=settings,
        envelope_gpu_memory_gib=_envelope_memory(ctx, settings),
        accelerator=ctx.pool(settings.execution.pool).accelerator
        if settings.execution.pool
        else None,
    )
    return tasks.submit(
        session,
        kind=PREVIEW,
        project=settings.project,
        pool=settings.execution.pool or "",
        params=params.to_json(),
    )


def _envelope_memory(ctx: AppContext, settings: Settings) -> float | None:
    """The device memory per GPU the run's catalog envelope qualifies, where it states one."""
    for model in ctx.catalog:
        if model.id == settings.base_model.id:
            envelope = model.envelope(
                settings.method, settings.engine, settings.execution.gpus, ctx.image_text_rl
            )
            return envelope.gpu_memory_gib if envelope and envelope.gpu_memory_gib else None
    return None
