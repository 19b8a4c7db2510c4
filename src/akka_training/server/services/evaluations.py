"""Evaluations (`core.evaluations`): a plan checked and resolved (base model, dataset, source
run's adapter, scoring bundles), submitted as a task of kind `evaluate` that the controller
runs through the cluster backend (`controller/tasks.py`); read, listed, cancelled, and their
scored samples read back, worst or best first."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import desc, select
from sqlalchemy.orm import Session, object_session

from akka_training.api.evaluations import (
    EvaluationDryRun,
    EvaluationRecord,
    EvaluationSamples,
    MetricValue,
)
from akka_training.api.evaluations import EvaluationSource as SourceRecord
from akka_training.core import blobkeys
from akka_training.core.errors import AkkaError, NotFound, PlanRefused, Problem
from akka_training.core.evaluations import (
    EVALUATE,
    EvaluateParams,
    EvaluationPlan,
    EvaluationResult,
    PreferenceMetric,
    read_evaluation,
)
from akka_training.core.evaluations import (
    MetricValue as MetricResult,
)
from akka_training.core.phases import Phase
from akka_training.core.plans import RuleTerm
from akka_training.core.resolved import (
    BASE_REFERENCE,
    BaseModelPin,
    BundlePin,
    ReferencePin,
    recorded_reference,
)
from akka_training.core.states import ClaimState, TaskState
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.services import tasks
from akka_training.server.services.datasets import resolve_dataset
from akka_training.server.services.lookups import find_run
from akka_training.server.services.plans import (
    catalog_model,
    known_pool,
    known_project,
    model_pin,
    pin_bundles,
)
from akka_training.server.services.run_views import claim_queue
from akka_training.storage.ids import new_id
from akka_training.storage.models import Run, Snapshot, Task
from akka_training.storage.transitions import open_task_claim, task_claim
from akka_training.telemetry import catalog as names

Order = Literal["worst", "best"]


@dataclass
class Checked:
    params: EvaluateParams
    pool: str
    run_id: str | None
    gpus: int = 1


def start(
    session: Session, ctx: AppContext, principal: Principal, document: Any, dry_run: bool
) -> EvaluationRecord | EvaluationDryRun:
    """A new evaluation (PENDING), or with `dry_run` its resolved parameters; `PlanRefused`
    with every problem."""
    if not isinstance(document, dict):
        raise PlanRefused([Problem("kind", "An evaluation plan is a mapping.")])
    evaluation_id = new_id("ev")
    plan = _readable(session, ctx, principal, document, evaluation_id)
    if dry_run or ctx.telemetry is None:
        checked = check(session, ctx, principal, plan, evaluation_id)
        if dry_run:
            return EvaluationDryRun(dry_run=True, resolved=checked.params.to_json())
        return evaluation_record(create(session, plan, checked, evaluation_id, None))
    attributes = {names.PROJECT: plan.project, names.EVALUATION_ID: evaluation_id}
    with ctx.telemetry.operation("evaluation.submit", **attributes) as span:
        checked = check(session, ctx, principal, plan, evaluation_id)
        span.set_attribute(names.DATASET, checked.params.dataset_ref)
        task = create(session, plan, checked, evaluation_id, None)
        # The job's spans join this one's trace (its root span is a child of this span).
        task.traceparent = ctx.telemetry.traceparent()
        return evaluation_record(task)


def _readable(
    session: Session, ctx: AppContext, principal: Principal, document: Any, evaluation_id: str
) -> EvaluationPlan:
    """The plan, or `PlanRefused` with every problem at once: those of the document, and those
    the checks find in what of it still parses (a field that failed and took its default is
    not checked)."""
    read = read_evaluation(document)
    if read.plan is not None and not read.problems:
        return read.plan
    problems = list(read.problems)
    if read.plan is not None:
        try:
            check(session, ctx, principal, read.plan, evaluation_id)
        except PlanRefused as refused:
            problems += [
                p
                for p in refused.all_problems
                if not any(
                    p.field == f or p.field.startswith((f + ".", f + "[")) for f in read.removed
                )
            ]
    raise PlanRefused(problems, "evaluation plan")


def create(
    session: Session, plan: EvaluationPlan, checked: Checked, evaluation_id: str, key: str | None
) -> Task:
    """The PENDING task of a checked evaluation; `key` ties it to a pipeline's stage."""
    task = Task(
        id=evaluation_id,
        kind=EVALUATE,
        project=plan.project,
        run_id=checked.run_id,
        key=key,
        pool=checked.pool,
        params=checked.params.to_json(),
        state=TaskState.PENDING,
    )
    session.add(task)
    session.flush()
    # It claims its devices like a run: the controller launches it once the claim is granted.
    open_task_claim(session, task.id, task.project, task.pool, checked.gpus)
    session.flush()
    return task


def check(
    session: Session,
    ctx: AppContext,
    principal: Principal,
    plan: EvaluationPlan,
    evaluation_id: str,
) -> Checked:
    """Look up and pin what the plan names, or refuse it with every problem."""
    problems: list[Problem] = []
    principal.require(plan.project)
    known_project(session, plan.project, problems)
    pin = _base_model(ctx, plan.base_model, problems)
    pool = plan.execution.pool or ctx.default_pool
    if known_pool(ctx, pool, problems):
        max_claim = ctx.pool(pool).max_claim
        if plan.execution.gpus > max_claim:
            problems.append(
                Problem(
                    "execution.gpus",
                    f"The evaluation claims {plan.execution.gpus} devices, more than pool "
                    f"{pool} accepts (MAX CLAIM {max_claim}); set execution.gpus to {max_claim} "
                    "or less, or choose another execution.pool (`akka training capacity`).",
                )
            )
    dataset_ref, dataset_blob = _dataset(session, principal, plan, pin, problems)
    adapter, tokenizer, run_id, own_reference = _source(session, principal, plan, problems)
    bundles = _bundles(session, principal, plan, problems)
    if problems or pin is None:
        raise PlanRefused(problems, "evaluation plan")
    params = EvaluateParams(
        name=plan.name,
        source=plan.source,
        dataset_ref=dataset_ref,
        base_model=pin,
        adapter=adapter,
        tokenizer=tokenizer,
        dataset=dataset_blob,
        generation=plan.generation,
        metrics=plan.metrics,
        bundles=bundles,
        samples=blobkeys.evaluation_samples(evaluation_id),
        seed=plan.seed,
        gpus=plan.execution.gpus,
        reference=_reference(plan, own_reference),
        engine=ctx.settings.trainer.endpoints.engine,
        vllm_python=ctx.settings.trainer.endpoints.vllm_python,
    )
    return Checked(params, pool, run_id, plan.execution.gpus)


def list_evaluations(
    session: Session, principal: Principal, project: str | None, limit: int
) -> list[EvaluationRecord]:
    query = select(Task).where(Task.kind == EVALUATE).order_by(desc(Task.created_at)).limit(limit)
    if project:
        principal.require(project)
        query = query.where(Task.project == project)
    elif principal.projects is not None:
        query = query.where(Task.project.in_(principal.projects))
    return [evaluation_record(t) for t in session.scalars(query)]


def get(session: Session, ctx: AppContext, principal: Principal, ref: str) -> EvaluationRecord:
    task = evaluation_for(session, principal, ref)
    answer = evaluation_record(task)
    claim = task_claim(session, task.id)
    if claim is not None and claim.state == ClaimState.QUEUED:
        answer.queue = claim_queue(session, ctx, claim)
    return answer


def cancel(session: Session, principal: Principal, ref: str) -> EvaluationRecord:
    task = evaluation_for(session, principal, ref)
    tasks.cancel(session, principal, task.id)
    return evaluation_record(task)


def samples(
    session: Session,
    ctx: AppContext,
    principal: Principal,
    ref: str,
    order: Order,
    metric: str | None,
    limit: int,
) -> EvaluationSamples:
    """The evaluation's scored samples, worst (or best) first by their score or by one
    metric's value."""
    task = evaluation_for(session, principal, ref)
    if task.state != TaskState.SUCCEEDED or not task.result:
        raise NotFound(
            f"Evaluation {task.id} has no scored samples: it is {task.state}. Read them once it "
            f"succeeds (`akka training evaluations wait {task.id}`)."
        )
    result = EvaluationResult.model_validate(task.result)
    names = [m.name for m in result.metrics if m.kind not in ("loss", "pass@k")]
    if metric is not None and metric not in names:
        raise NotFound(
            f"Evaluation {task.id} scores no metric {metric!r} per sample; its metrics: "
            f"{', '.join(names) or 'none'}."
        )
    rows = [json.loads(line) for line in ctx.blobs.get_bytes(result.samples).splitlines() if line]

    def key(row: dict[str, Any]) -> float:
        return float(row["values"].get(metric, 0.0)) if metric else float(row["score"])

    rows.sort(key=key, reverse=order == "best")
    return EvaluationSamples(evaluation=task.id, order=order, total=len(rows), samples=rows[:limit])


def evaluation_for(session: Session, principal: Principal, ref: str) -> Task:
    """An evaluation of the projects `principal` may read, by id or prefix; another project's
    answers as one that does not exist."""
    principal.refuse_reporters()
    task = session.get(Task, ref)
    if task is not None and not principal.can(task.project):
        task = None
    if task is None and len(ref) >= 3:
        query = select(Task).where(Task.kind == EVALUATE, Task.id.startswith(ref))
        if principal.projects is not None:
            query = query.where(Task.project.in_(principal.projects))
        matches = session.scalars(query.limit(3)).all()
        if len(matches) > 1:
            raise NotFound(f"{ref!r} matches several evaluations; give more of the id.")
        task = matches[0] if matches else None
    if task is None or task.kind != EVALUATE:
        raise NotFound(f"There is no evaluation {ref!r}.")
    return task


def evaluation_record(task: Task) -> EvaluationRecord:
    params = EvaluateParams.model_validate(task.params)
    result = EvaluationResult.model_validate(task.result) if task.result else None
    session = object_session(task)
    claim = task_claim(session, task.id) if session is not None else None
    source = params.source
    return EvaluationRecord(
        id=task.id,
        project=task.project,
        name=params.name,
        state=task.state,
        requested=task.requested,
        base_model=params.base_model.id,
        source=SourceRecord(run=source.run, snapshot=source.snapshot) if source else None,
        dataset=params.dataset_ref,
        generation=params.generation.to_json(),
        metrics_planned=[m.to_json() for m in params.metrics],
        metrics=[_metric(m) for m in result.metrics] if result else None,
        sample_count=result.sample_count if result else None,
        prompts=result.prompts if result else None,
        engine=result.engine if result else None,
        pool=task.pool,
        gpus=params.gpus,
        claim=claim.state if claim is not None else None,
        queue=None,
        progress=tasks.progress_view(task.progress),
        failure=task.failure,
        failure_detail=task.last_error if task.state == TaskState.FAILED else None,
        created_at=task.created_at,
        started_at=task.started_at,
        ended_at=task.ended_at,
    )


def _metric(m: MetricResult) -> MetricValue:
    return MetricValue(
        name=m.name,
        kind=m.kind,
        mean=m.mean,
        low=m.low,
        high=m.high,
        stderr=m.stderr,
        count=m.count,
        reference=m.reference,
    )


# --- resolving -----------------------------------------------------------------------------------


def _base_model(ctx: AppContext, model_id: str, problems: list[Problem]) -> BaseModelPin | None:
    model = catalog_model(ctx, model_id, problems)
    return model_pin(model) if model is not None else None


def _dataset(
    session: Session,
    principal: Principal,
    plan: EvaluationPlan,
    pin: BaseModelPin | None,
    problems: list[Problem],
) -> tuple[str, str]:
    try:
        version = resolve_dataset(session, plan.dataset, principal)
    except AkkaError as exc:
        problems.append(Problem("dataset", f"dataset: {exc.message}"))
        return "", ""
    ref = f"{version.project}/{version.name}:v{version.version}"
    pairs = version.format == "preference"
    scores_pairs = any(m.kind == "preference" for m in plan.metrics)
    if scores_pairs and not pairs:
        problems.append(
            Problem(
                "dataset",
                f"Dataset {ref} is a {version.format} dataset, and a preference metric scores "
                "pairs of a chosen and a rejected answer; evaluate it on a preference dataset.",
            )
        )
    elif pairs and not scores_pairs:
        problems.append(
            Problem(
                "dataset",
                f"Dataset {ref} is a preference dataset, whose pairs only a preference metric "
                "scores; add {kind: preference} to metrics, or evaluate on a chat or "
                "prompt-completion dataset.",
            )
        )
    if version.has_images and pin is not None:
        if pin.modality == "text":
            problems.append(
                Problem(
                    "dataset",
                    f"Dataset {ref} holds images, and base model {pin.id} reads text only; "
                    "evaluate it on a dataset without images, or choose an image-text base "
                    "model.",
                )
            )
        else:
            problems.append(
                Problem(
                    "dataset",
                    f"Dataset {ref} holds images; evaluations score text prompts only in this "
                    "release: use a dataset without images.",
                )
            )
    return ref, version.blob


def _reference(plan: EvaluationPlan, own: ReferencePin) -> ReferencePin | None:
    """What a preference metric measures against: the evaluated run's own reference, or the
    base model where the metric asks for it; None without a preference metric."""
    metric = next((m for m in plan.metrics if isinstance(m, PreferenceMetric)), None)
    if metric is None:
        return None
    return BASE_REFERENCE if metric.reference == "base-model" else own


def _source(
    session: Session, principal: Principal, plan: EvaluationPlan, problems: list[Problem]
) -> tuple[str | None, str | None, str | None, ReferencePin]:
    """(adapter blob prefix, tokenizer prefix, run id, the run's own reference) of the plan's
    source. A dpo run's own reference is the one it trained against; any other run's, and the
    base model's, is the base model."""
    if plan.source is None:
        return None, None, None, BASE_REFERENCE
    try:
        run = find_run(session, plan.source.run, principal)
    except AkkaError as exc:
        problems.append(Problem("source.run", f"source.run: {exc.message}"))
        return None, None, None, BASE_REFERENCE
    if run.project != plan.project:
        problems.append(
            Problem(
                "source.run",
                f"Run {run.id} belongs to project {run.project}, not {plan.project}; evaluate "
                f"it in its own project (project: {run.project}).",
            )
        )
        return None, None, None, BASE_REFERENCE
    if run.base_model != plan.base_model:
        problems.append(
            Problem(
                "baseModel",
                f"Run {run.id} trained an adapter of {run.base_model}, not {plan.base_model}; "
                f"set baseModel to {run.base_model}.",
            )
        )
    weights = _weights(session, run, plan.source.snapshot, problems)
    own = recorded_reference(run.settings or {}) if run.method == "dpo" else BASE_REFERENCE
    return weights, blobkeys.tokenizer_prefix(run.id), run.id, own


def _weights(
    session: Session, run: Run, snapshot: str | None, problems: list[Problem]
) -> str | None:
    if snapshot is None:
        if run.phase != Phase.COMPLETED or not run.adapter:
            problems.append(
                Problem(
                    "source.run",
                    f"Run {run.id} has no final adapter (it is {run.phase}); wait for it to "
                    "complete, or evaluate one of its snapshots (source.snapshot).",
                )
            )
            return None
        return str(run.adapter)
    snap = session.get(Snapshot, (run.id, snapshot))
    if snap is None or snap.swept_at is not None:
        names = session.scalars(
            select(Snapshot.name).where(Snapshot.run_id == run.id, Snapshot.swept_at.is_(None))
        ).all()
        problems.append(
            Problem(
                "source.snapshot",
                f"Run {run.id} has no snapshot {snapshot!r}; its snapshots: "
                f"{', '.join(names) or 'none'}.",
            )
        )
        return None
    return str(snap.weights)


def _bundles(
    session: Session, principal: Principal, plan: EvaluationPlan, problems: list[Problem]
) -> dict[str, BundlePin]:
    users = [
        (f"metrics[{i}].bundle", metric)
        for i, metric in enumerate(plan.metrics)
        if isinstance(metric, RuleTerm)
    ]
    return pin_bundles(session, principal, users, problems)
