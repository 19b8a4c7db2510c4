"""Resolution: a plan becomes the settings a run trains under, or a refusal listing every problem.

The service looks up what the plan names (project, catalog model, pool, dataset versions, source
run and snapshot), fills every default, runs the rules of `akka_training.core.validation`, and
pins every reference: the dataset by version and hash, the base model by path and revision, the
source by run, snapshot and blob keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.core.catalog import CatalogModel, engine_for
from akka_training.core.defaults import fill_defaults, lora_of
from akka_training.core.errors import AkkaError, PlanRefused, Problem
from akka_training.core.interactive import INTERACTIVE_METHOD, InteractiveSettings
from akka_training.core.parsing import salvage
from akka_training.core.phases import Phase
from akka_training.core.plans import RL_METHODS, RuleTerm, RunPlan
from akka_training.core.refs import stage_of
from akka_training.core.resolved import (
    BaseModelPin,
    BundlePin,
    DatasetPin,
    Settings,
    SourcePin,
    dpo_reference,
)
from akka_training.core.validation import Checked, DatasetInfo, PoolInfo, SourceInfo, validate
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.services.bundles import resolve_bundle
from akka_training.server.services.datasets import resolve_dataset
from akka_training.server.services.lookups import find_run
from akka_training.storage.models import DatasetVersion, Project, Run, Snapshot


@dataclass
class Resolved:
    settings: Settings
    source_kind: str | None  # warm-start, branch, continue


@dataclass
class StageBinding:
    """Inside a pipeline: how `@STAGE` references resolve. `runs` maps an earlier stage's name to
    its run id once that run exists; a stage without a run yet resolves to nothing (dry run)."""

    earlier: list[str]
    runs: dict[str, str]


def resolve_run(
    session: Session,
    ctx: AppContext,
    principal: Principal,
    plan: RunPlan,
    stages: StageBinding | None = None,
) -> Resolved:
    """The resolved settings of `plan`, or `PlanRefused` with every problem."""
    checked, pins = check_run(session, ctx, principal, plan, stages)
    problems = validate(checked)
    if problems:
        raise PlanRefused(problems)
    return build_settings(ctx, checked, pins)


def every_problem(
    session: Session,
    ctx: AppContext,
    principal: Principal,
    document: dict[str, Any],
    refused: PlanRefused,
    stages: StageBinding | None = None,
) -> PlanRefused:
    """A plan refused for its schema, with the problems the rules find in what still parses
    (the plan without its failed fields) added, so that every problem comes at once. A problem
    of a field that was left out (it took its default) is not added."""
    plan, removed = salvage(RunPlan, document)
    if plan is None:
        return refused
    checked, _ = check_run(session, ctx, principal, plan, stages)
    seen = {(p.field, p.message) for p in refused.all_problems}
    more = [
        p
        for p in validate(checked)
        if (p.field, p.message) not in seen
        and not any(
            p.field == f or p.field.startswith(f + ".") or p.field.startswith(f + "[")
            for f in removed
        )
    ]
    return PlanRefused([*refused.all_problems, *more]) if more else refused


def check_run(
    session: Session,
    ctx: AppContext,
    principal: Principal,
    plan: RunPlan,
    stages: StageBinding | None = None,
) -> tuple[Checked, dict[str, object]]:
    """Look up what the plan names and fill its defaults; nothing is refused yet."""
    problems: list[Problem] = []
    pins: dict[str, object] = {}
    principal.require(plan.project)
    known_project(session, plan.project, problems)
    model = catalog_model(ctx, plan.base_model, problems)
    pool_name = plan.execution.pool or ctx.default_pool
    pool = None
    if known_pool(ctx, pool_name, problems):
        spec = ctx.pool(pool_name)
        seen = ctx.controller.observed() if ctx.controller is not None else None
        node = seen.get(spec.name) if seen else None
        pool = PoolInfo(
            spec.name,
            spec.max_claim,
            spec.host_ram_gib,
            largest_node=node.largest_node if node is not None else None,
        )

    dataset_from_stage = None
    dataset = None
    text = plan.config.dataset
    stage = stage_of(text)
    if stage is not None:
        dataset_from_stage = _stage_ref(stage, "config.dataset", stages, problems)
    else:
        version = _dataset(session, principal, text, "config.dataset", problems)
        if version is not None:
            dataset = _dataset_info(version)
            pins["dataset"] = _dataset_pin(text, version)
    eval_dataset = None
    if plan.config.eval_dataset:
        if stage_of(plan.config.eval_dataset) is not None:
            problems.append(
                Problem(
                    "config.evalDataset",
                    "config.evalDataset must be a registered dataset, not a stage's output.",
                )
            )
        else:
            version = _dataset(
                session, principal, plan.config.eval_dataset, "config.evalDataset", problems
            )
            if version is not None:
                eval_dataset = _dataset_info(version)
                pins["evalDataset"] = _dataset_pin(plan.config.eval_dataset, version)

    source = None
    source_lora = None
    if plan.source is not None:
        source_run_id = plan.source.run
        stage = stage_of(source_run_id)
        if stage is not None:
            _stage_ref(stage, "source.run", stages, problems)
            source_run_id = (stages.runs.get(stage) if stages else None) or ""
        if source_run_id:
            found = _source(session, principal, plan, source_run_id, problems)
            if found is not None:
                source, pin, source_settings = found
                source_lora = source.lora
                pins["source"] = pin
                pins["sourceSettings"] = source_settings

    method = plan.config.method
    rl_engine = ctx.engine
    envelope = (
        model.envelope(method, rl_engine, plan.execution.gpus, ctx.image_text_rl) if model else None
    )
    if model is not None and envelope is None:
        # Precision still comes from the model's envelopes for the method, when there is one.
        envelope = next(
            (
                e
                for e in model.envelopes
                if e.method == method and e.engine == engine_for(method, rl_engine)
            ),
            None,
        )
    filled = fill_defaults(plan, model, envelope, pool_name, source_lora)
    pins["bundles"] = _pin_bundles(session, principal, filled, problems)
    given_lora = None
    section = plan.config.rl_hyperparams if method in RL_METHODS else plan.config.hyperparams
    if (
        section is not None
        and "lora" in section.model_fields_set
        and "rank" in section.lora.model_fields_set
    ):
        given_lora = section.lora.rank
    checked = Checked(
        plan=filled,
        engine=rl_engine,
        image_text_rl=ctx.image_text_rl,
        model=model,
        pool=pool,
        dataset=dataset,
        eval_dataset=eval_dataset,
        source=source,
        lora_rank_given=given_lora,
        dataset_from_stage=dataset_from_stage,
        lookup_problems=problems,
    )
    pins["model"] = model
    return checked, pins


def build_settings(ctx: AppContext, checked: Checked, pins: dict[str, object]) -> Resolved:
    """The resolved settings from a checked plan and its pins (the plan passed every rule)."""
    plan = checked.plan
    model = pins["model"]
    assert isinstance(model, CatalogModel)
    dataset = pins.get("dataset")
    assert isinstance(dataset, DatasetPin), "a pipeline stage on a stage's output is resolved later"
    source = pins.get("source")
    source_pin = source if isinstance(source, SourcePin) else None
    config = plan.config.model_copy(deep=True)
    # The resolved config pins the dataset by hash: submitted again, it trains on the same rows.
    config.dataset = f"{dataset.name}@sha256:{dataset.sha256}"
    eval_pin = pins.get("evalDataset")
    if isinstance(eval_pin, DatasetPin):
        config.eval_dataset = f"{eval_pin.name}@sha256:{eval_pin.sha256}"
    settings = Settings(
        project=plan.project,
        method=plan.config.method,
        engine=engine_for(plan.config.method, checked.engine),  # type: ignore[arg-type]
        base_model=model_pin(model),
        dataset=dataset,
        eval_dataset=eval_pin if isinstance(eval_pin, DatasetPin) else None,
        source=source_pin,
        reference=(
            dpo_reference(source_pin, _settings_of(pins.get("sourceSettings")))
            if plan.config.method == "dpo"
            else None
        ),
        bundles=pins.get("bundles") or {},  # type: ignore[arg-type]
        config=config,
        execution=plan.execution,
    )
    return Resolved(settings, settings.source.kind if settings.source else None)


def _pin_bundles(
    session: Session, principal: Principal, plan: RunPlan, problems: list[Problem]
) -> dict[str, BundlePin]:
    """Pin the bundles of rule terms and tools, rewriting their references in `plan` to the
    pinned form (PROJECT/NAME@sha256:HASH)."""
    users: list[tuple[str, Any]] = []
    if plan.config.reward is not None:
        users += [
            (f"config.reward.terms[{i}].bundle", t)
            for i, t in enumerate(plan.config.reward.terms)
            if isinstance(t, RuleTerm)
        ]
    users += [(f"config.tools[{i}].bundle", t) for i, t in enumerate(plan.config.tools)]
    return pin_bundles(session, principal, users, problems)


def model_pin(model: CatalogModel) -> BaseModelPin:
    """What a job needs of its catalog model, pinned in its settings."""
    return BaseModelPin(
        id=model.id,
        path=model.path,
        revision=model.revision,
        modality=model.modality,
        context_length=model.context_length,
    )


def pin_bundles(
    session: Session,
    principal: Principal,
    users: Sequence[tuple[str, Any]],
    problems: list[Problem],
) -> dict[str, BundlePin]:
    """Pin the bundle each (field, holder) names, rewriting the holder's ``bundle`` to the
    pinned form (PROJECT/NAME@sha256:HASH); a bundle the caller cannot use is a problem of its
    field. Run plans, regrade rewards and evaluation metrics pin the same way."""
    pins: dict[str, BundlePin] = {}
    for field, holder in users:
        try:
            row = resolve_bundle(session, holder.bundle, principal)
        except AkkaError as exc:
            problems.append(Problem(field, f"{field}: {exc.message}"))
            continue
        pinned = f"{row.project}/{row.name}@sha256:{row.sha256}"
        pins[pinned] = BundlePin(
            name=f"{row.project}/{row.name}", version=row.version, sha256=row.sha256, blob=row.blob
        )
        holder.bundle = pinned
    return pins


def known_project(session: Session, project: str, problems: list[Problem]) -> None:
    """A plan's project must exist."""
    if session.get(Project, project) is None:
        problems.append(
            Problem(
                "project",
                f"There is no project {project!r}; create it with "
                f"`akka training projects create {project}` or fix project.",
            )
        )


def known_pool(ctx: AppContext, pool: str, problems: list[Problem]) -> bool:
    """A plan's execution.pool must be one of the deployment's pools."""
    if pool in ctx.pool_names:
        return True
    problems.append(
        Problem(
            "execution.pool",
            f"There is no pool {pool!r}; set execution.pool to one of: "
            f"{', '.join(ctx.pool_names)}.",
        )
    )
    return False


def catalog_model(ctx: AppContext, model_id: str, problems: list[Problem]) -> CatalogModel | None:
    """The catalog's model `model_id`; a problem of `baseModel` when it is unknown or not
    available."""
    for m in ctx.catalog:
        if m.id == model_id:
            if m.status != "available":
                problems.append(
                    Problem("baseModel", f"Base model {model_id} is {m.status}; choose another.")
                )
            return m
    known = ", ".join(m.id for m in ctx.catalog) or "none"
    problems.append(
        Problem(
            "baseModel",
            f"There is no base model {model_id!r} in this deployment's catalog; set baseModel "
            f"to one of: {known}.",
        )
    )
    return None


def _dataset(
    session: Session, principal: Principal, text: str, field: str, problems: list[Problem]
) -> DatasetVersion | None:
    try:
        version = resolve_dataset(session, text, principal)
        return version
    except AkkaError as exc:
        problems.append(Problem(field, f"{field}: {exc.message}"))
        return None


def _dataset_info(version: DatasetVersion) -> DatasetInfo:
    return DatasetInfo(
        ref=f"{version.project}/{version.name}:v{version.version}",
        format=version.format,
        has_images=version.has_images,
        rows=version.rows,
    )


def _dataset_pin(text: str, version: DatasetVersion) -> DatasetPin:
    return DatasetPin(
        ref=text,
        name=f"{version.project}/{version.name}",
        version=version.version,
        sha256=version.sha256,
        rows=version.rows,
        bytes=version.bytes,
        format=version.format,  # type: ignore[arg-type]
        has_images=version.has_images,
        blob=version.blob,
    )


def _stage_ref(
    stage: str, field: str, stages: StageBinding | None, problems: list[Problem]
) -> str | None:
    if stages is None:
        problems.append(
            Problem(
                field, f"{field} @{stage} refers to a pipeline stage; use it only in a pipeline."
            )
        )
        return None
    if stage not in stages.earlier:
        earlier = ", ".join(stages.earlier) or "none"
        problems.append(
            Problem(
                field,
                f"{field} @{stage} must name an earlier stage of this pipeline (earlier: {earlier}).",
            )
        )
        return None
    return stage


def _trains_unembedding(run: Run) -> bool:
    """Whether `run` is an interactive run whose adapter covers lm_head: TRL trains no adapter
    there (it reads the output layer's weight directly), so a plan cannot start from it."""
    if run.method != INTERACTIVE_METHOD:
        return False
    return InteractiveSettings.model_validate(run.settings).lora.train_unembed


def _source(
    session: Session,
    principal: Principal,
    plan: RunPlan,
    run_id: str,
    problems: list[Problem],
) -> tuple[SourceInfo, SourcePin, dict[str, Any]] | None:
    """The source's facts, its pin and the source run's resolved settings (where a dpo
    continuation finds the reference it keeps)."""
    assert plan.source is not None
    try:
        run = find_run(session, run_id, principal)
    except AkkaError as exc:
        problems.append(Problem("source.run", f"source.run: {exc.message}"))
        return None
    if _trains_unembedding(run):
        problems.append(
            Problem(
                "source.run",
                f"source.run: run {run.id} is a Tinker session whose adapter trains the output "
                "layer (lm_head, the SDK's train_unembed=True), which sft, dpo, grpo and gspo "
                "runs cannot train further. Start the session with "
                "create_lora_training_client(..., train_unembed=False) to continue it here; its "
                "snapshots can still be served (`akka training endpoints create`) or "
                "downloaded.",
            )
        )
        return None
    lora = lora_of(run.settings)
    snapshot_name = plan.source.snapshot
    if snapshot_name is None:
        if plan.source.restore == "trainingState":
            problems.append(
                Problem(
                    "source.restore",
                    "Restoring the training state needs a snapshot; set source.snapshot.",
                )
            )
            return None
        if run.phase != Phase.COMPLETED or not run.adapter:
            problems.append(
                Problem(
                    "source.run",
                    f"Run {run.id} has no final adapter (it is {run.phase}); wait for it to "
                    "complete, or start from one of its snapshots (source.snapshot).",
                )
            )
            return None
        info = SourceInfo(
            run.id, run.base_model, run.method, lora, run.observed_step, _gpus_of(run.settings)
        )
        pin = SourcePin(
            kind="warm-start",
            run=run.id,
            snapshot=None,
            step=run.observed_step,
            weights=run.adapter,
            lora_rank=lora.rank if lora else None,
            lora_alpha=lora.alpha if lora else None,
        )
        return info, pin, dict(run.settings or {})
    snapshot = session.get(Snapshot, (run.id, snapshot_name))
    if snapshot is None or snapshot.swept_at is not None:
        names = session.scalars(
            select(Snapshot.name).where(Snapshot.run_id == run.id, Snapshot.swept_at.is_(None))
        ).all()
        listed = ", ".join(names) or "none"
        problems.append(
            Problem(
                "source.snapshot",
                f"Run {run.id} has no snapshot {snapshot_name!r}; its snapshots: {listed}.",
            )
        )
        return None
    restore = plan.source.restore
    if restore == "trainingState" and not snapshot.training_state:
        problems.append(
            Problem(
                "source.restore",
                f"Snapshot {snapshot_name} of run {run.id} has no training state; branch from "
                "its weights instead (restore: weights).",
            )
        )
        return None
    info = SourceInfo(
        run.id, run.base_model, run.method, lora, snapshot.step, _gpus_of(run.settings)
    )
    pin = SourcePin(
        kind="continue" if restore == "trainingState" else "branch",
        run=run.id,
        snapshot=snapshot.name,
        step=snapshot.step,
        weights=snapshot.weights,
        training_state=snapshot.training_state if restore == "trainingState" else None,
        lora_rank=lora.rank if lora else None,
        lora_alpha=lora.alpha if lora else None,
    )
    return info, pin, dict(run.settings or {})


def _settings_of(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _gpus_of(settings: dict[str, object] | None) -> int | None:
    """The GPU count a run trained on, from its resolved settings."""
    execution = (settings or {}).get("execution")
    gpus = execution.get("gpus") if isinstance(execution, dict) else None
    return gpus if isinstance(gpus, int) else None
