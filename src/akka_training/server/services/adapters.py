"""A run's adapter and merged model as they leave the trainer, in the Hugging Face layout:

    adapter_config.json          PEFT's config, naming the base model by its public name
    adapter_model.safetensors    the weights (final, or one snapshot's)
    tokenizer files              the tokenizer (or processor) and chat template the run trained with
    README.md                    the model card (`core.model_cards`)
    training_settings.json       the resolved settings (what --show-resolved prints)

A merged model (`runs export --merged`) is made by a merge task on the cluster (never here)
and leaves as its files (config, weights, tokenizer) with the same card and settings.

`manifest` lists every file with its size and sha256; `open_file` streams one file from the
blob store a chunk at a time (or the few kilobytes written here), so the service never holds a
whole model. Both look the run up in a short session of their own and read the store after it
closes. Every refusal says why there is nothing to download and what to do instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import desc, select
from sqlalchemy.orm import Session

from akka_training.api.adapters import AdapterFile, AdapterManifest
from akka_training.api.tasks import TaskRecord
from akka_training.core import blobkeys
from akka_training.core.catalog import CatalogModel
from akka_training.core.downloads import download_directory
from akka_training.core.errors import AkkaError, Conflict, InvalidRequest, NotFound
from akka_training.core.failures import FailureReason, failure_text
from akka_training.core.figures import Figures
from akka_training.core.model_cards import (
    CardFacts,
    lineage_text,
    model_card,
    public_names,
    published_settings,
)
from akka_training.core.phases import TERMINAL, Phase
from akka_training.core.resolved import BaseModelPin
from akka_training.core.states import TaskState
from akka_training.core.tasks import MERGE, MergeParams, MergeResult, base_model_unavailable
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.services import tasks
from akka_training.server.services.lookups import run_for
from akka_training.storage.models import Pipeline, Run, Snapshot, Step, Task

Kind = Literal["adapter", "merged"]
CHUNK = 1 << 20
WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
CARD = "README.md"
SETTINGS = "training_settings.json"


@dataclass(frozen=True)
class Part:
    """One file of a download: a blob of the store (`key`), or text written here (`content`).
    `sha256` is known beforehand for what a merge task stored."""

    path: str
    size: int
    key: str | None = None
    content: bytes | None = None
    sha256: str | None = None


@dataclass
class Selection:
    run_id: str
    project: str
    kind: Kind
    snapshot: str | None
    step: int
    directory: str
    base_model: str
    public_name: str
    parts: list[Part] = field(default_factory=list)


def manifest(
    ctx: AppContext, principal: Principal, run_ref: str, snapshot: str | None, kind: Kind
) -> AdapterManifest:
    """Every file of the download with its size and sha256 (hashed here, a chunk at a time,
    for what the store does not know the hash of)."""
    selection = _select(ctx, principal, run_ref, snapshot, kind)
    files = [
        AdapterFile(path=p.path, bytes=p.size, sha256=p.sha256 or _digest(ctx, p))
        for p in selection.parts
    ]
    return AdapterManifest(
        run=selection.run_id,
        project=selection.project,
        kind=selection.kind,
        snapshot=selection.snapshot,
        step=selection.step,
        directory=selection.directory,
        base_model=selection.base_model,
        base_model_name_or_path=selection.public_name,
        files=files,
        total_bytes=sum(f.bytes for f in files),
    )


def open_file(
    ctx: AppContext,
    principal: Principal,
    run_ref: str,
    snapshot: str | None,
    kind: Kind,
    path: str,
) -> tuple[Iterator[bytes], int]:
    """The chunks of one file of the download, and its size."""
    selection = _select(ctx, principal, run_ref, snapshot, kind)
    for part in selection.parts:
        if part.path == path:
            if part.content is not None:
                return iter([part.content]), part.size
            assert part.key is not None
            return _chunks(ctx, part.key), part.size
    names = ", ".join(p.path for p in selection.parts)
    raise NotFound(
        f"The {_what(kind)} of run {selection.run_id} has no file {path!r}; its files: {names}."
    )


def export_merged(
    session: Session, ctx: AppContext, principal: Principal, run_ref: str, snapshot: str | None
) -> tuple[TaskRecord, bool]:
    """Start a merge task for the run's final adapter (or a snapshot's weights), or find the
    one that made or is making it; the task, and whether it is new."""
    run = _find_run(session, principal, run_ref)
    weights, _ = _weights(session, run, snapshot, "export")
    key = merge_key(run.id, snapshot)
    existing = tasks.current(session, key)
    if existing is not None:
        return tasks.task_record(existing), False
    pin = BaseModelPin.model_validate(run.settings["baseModel"])
    if ctx.backend.sees_path(pin.path) is False:
        raise Conflict(base_model_unavailable(pin.id, pin.path, "this host", run.id))
    params = MergeParams(
        base_model=pin,
        weights=weights,
        tokenizer=blobkeys.tokenizer_prefix(run.id),
        output=blobkeys.merged_prefix(run.id, snapshot),
        snapshot=snapshot,
    )
    task = tasks.submit(
        session,
        kind=MERGE,
        project=run.project,
        pool=run.pool,
        params=params.to_json(),
        run_id=run.id,
        key=key,
    )
    return tasks.task_record(task), True


def merge_key(run_id: str, snapshot: str | None) -> str:
    return f"{MERGE}:{run_id}:{snapshot or 'final'}"


# --- choosing the files --------------------------------------------------------------------------


def _select(
    ctx: AppContext, principal: Principal, run_ref: str, snapshot: str | None, kind: Kind
) -> Selection:
    with ctx.db.session() as session:
        run = _find_run(session, principal, run_ref)
        if kind == "merged":
            return _merged(session, ctx, run, snapshot)
        return _adapter(session, ctx, run, snapshot)


def _adapter(session: Session, ctx: AppContext, run: Run, snapshot: str | None) -> Selection:
    weights, step = _weights(session, run, snapshot)
    blobs = ctx.blobs
    missing = [name for name in (CONFIG, WEIGHTS) if not blobs.exists(weights + name)]
    if missing:
        raise AkkaError(
            f"The stored adapter of run {run.id} at {weights} lacks {', '.join(missing)}; the "
            "blob store has lost part of it."
        )
    model = _catalog_model(ctx, run.base_model)
    public, revision = public_names(model, run.base_model)
    config = json.loads(blobs.get_bytes(weights + CONFIG))
    config["base_model_name_or_path"] = public
    config["revision"] = revision
    config_bytes = (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()
    parts = [
        Part(CONFIG, len(config_bytes), content=config_bytes),
        Part(WEIGHTS, blobs.size(weights + WEIGHTS), key=weights + WEIGHTS),
    ]
    parts += _stored(ctx, blobkeys.tokenizer_prefix(run.id), {CONFIG, WEIGHTS, CARD, SETTINGS})
    facts = _facts(session, ctx, run, "adapter", snapshot, step, config)
    parts += _written(facts, run)
    return Selection(
        run.id, run.project, "adapter", snapshot, step, facts.name, run.base_model, public, parts
    )


def _merged(session: Session, ctx: AppContext, run: Run, snapshot: str | None) -> Selection:
    key = merge_key(run.id, snapshot)
    done = session.scalar(
        select(Task)
        .where(Task.key == key, Task.state == TaskState.SUCCEEDED)
        .order_by(desc(Task.created_at))
        .limit(1)
    )
    at = f" of snapshot {snapshot}" if snapshot else ""
    flag = f" --snapshot {snapshot}" if snapshot else ""
    if done is None:
        waiting = tasks.current(session, key)
        if waiting is not None:
            raise Conflict(
                f"The merge of run {run.id}{at} is {waiting.state} (task {waiting.id}): wait for "
                f"it with `akka training runs export {run.id} --merged{flag}`."
            )
        raise NotFound(
            f"Run {run.id} has no merged model{at} yet; make one with "
            f"`akka training runs export {run.id} --merged{flag}`."
        )
    result = MergeResult.model_validate(done.result or {})
    step = _step_of(session, run, snapshot)
    model = _catalog_model(ctx, run.base_model)
    public, _ = public_names(model, run.base_model)
    parts = [
        Part(f.path, f.bytes, key=result.output + f.path, sha256=f.sha256)
        for f in result.files
        if f.path not in (CARD, SETTINGS)
    ]
    config = _adapter_config(ctx, MergeParams.model_validate(done.params).weights)
    facts = _facts(session, ctx, run, "merged", snapshot, step, config)
    parts += _written(facts, run)
    return Selection(
        run.id, run.project, "merged", snapshot, step, facts.name, run.base_model, public, parts
    )


def _weights(
    session: Session, run: Run, snapshot: str | None, verb: str = "download"
) -> tuple[str, int]:
    """The blob prefix of the weights to hand out and their step, or the refusal that says why
    there are none (and what to `verb` instead)."""
    if snapshot is None:
        if run.adapter:
            return run.adapter, run.observed_step
        raise Conflict(_no_final_adapter(session, run, verb))
    snap = session.get(Snapshot, (run.id, snapshot))
    if snap is None or snap.swept_at is not None:
        names = ", ".join(_snapshot_names(session, run.id)) or "none"
        if snap is None:
            raise NotFound(f"Run {run.id} has no snapshot {snapshot!r}; its snapshots: {names}.")
        raise NotFound(
            f"Snapshot {snapshot} of run {run.id} was removed by the keepAdapters sweep "
            f"(execution.keepAdapters); its snapshots: {names}."
        )
    return snap.weights, snap.step


def _no_final_adapter(session: Session, run: Run, verb: str) -> str:
    label = _label(run)
    phase = Phase(run.phase)
    latest = _latest_snapshot(session, run.id)
    step = run.observed_step
    if phase in (Phase.QUEUED, Phase.PREPARING):
        return (
            f"{label} has no adapter yet: it is {phase} and has not trained a step. "
            f"{verb.capitalize()} it once it completes (`akka training runs wait {run.id}`)."
        )
    if phase not in TERMINAL:
        total = f" of {run.total_steps}" if run.total_steps else ""
        if latest is None:
            every = (run.settings.get("execution") or {}).get("saveEvery")
            return (
                f"{label} has no adapter yet: it is {phase} at step {step}{total} and has saved "
                f"no snapshot (it saves every {every} steps). {verb.capitalize()} it once it "
                f"completes (`akka training runs wait {run.id}`)."
            )
        return (
            f"{label} has no final adapter yet: it is {phase} at step {step}{total}. "
            f"{verb.capitalize()} its latest snapshot with --snapshot {latest.name} (step "
            f"{latest.step}), or wait until it completes (`akka training runs wait {run.id}`)."
        )
    ended = "FAILED" if phase == Phase.FAILED else f"was {phase}"
    if latest is None:
        why = f" ({_failure_line(run)})" if run.failure_code else ""
        return f"{label} has no adapter: it {ended} before its first save{why}."
    return (
        f"{label} has no final adapter: it {ended} at step {step}. Its latest snapshot is "
        f"{latest.name} (step {latest.step}): {verb} it with --snapshot {latest.name}."
    )


def _find_run(session: Session, principal: Principal, ref: str) -> Run:
    """The run `ref` names; a pipeline's id is refused with the runs of its stages."""
    pipeline = _pipeline(session, principal, ref)
    if pipeline is not None:
        raise InvalidRequest(_pipeline_refusal(session, pipeline))
    return run_for(session, principal, ref)


def _pipeline(session: Session, principal: Principal, ref: str) -> Pipeline | None:
    """The pipeline `ref` names among the caller's projects (another project's is not named)."""
    # Run ids are hexadecimal; pipeline ids start with "p".
    if not ref.startswith("p") or len(ref) < 3:
        return None
    principal.refuse_reporters()
    found = session.get(Pipeline, ref)
    if found is not None and principal.can(found.project):
        return found
    query = select(Pipeline).where(Pipeline.id.startswith(ref))
    if principal.projects is not None:
        query = query.where(Pipeline.project.in_(principal.projects))
    matches = session.scalars(query.limit(2)).all()
    return matches[0] if len(matches) == 1 else None


def _pipeline_refusal(session: Session, pipeline: Pipeline) -> str:
    runs = session.scalars(
        select(Run).where(Run.pipeline_id == pipeline.id).order_by(Run.created_at)
    ).all()
    latest = {r.stage: r for r in runs}  # a stage run again keeps its newest run
    stages = []
    for stage in (pipeline.plan or {}).get("stages") or []:
        name = stage.get("name")
        run = latest.get(name)
        if run is None:
            stages.append(f"{name}: not started, so it has no adapter yet")
        else:
            stages.append(f"{name}: run {run.id}, {run.phase}")
    return (
        f"{pipeline.id} is a pipeline, not a run: download the adapter of one of its stages' "
        f"runs ({'; '.join(stages)})."
    )


# --- what the files say ---------------------------------------------------------------------------


def _facts(
    session: Session,
    ctx: AppContext,
    run: Run,
    kind: Kind,
    snapshot: str | None,
    step: int,
    config: dict[str, Any],
) -> CardFacts:
    model = _catalog_model(ctx, run.base_model)
    public, revision = public_names(model, run.base_model)
    settings = run.settings or {}
    loss, reward = _figures(session, run, snapshot, step)
    eval_loss = _eval_loss(session, run, snapshot, step)
    name = download_directory(run.model_name or run.id, snapshot, kind == "merged")
    modality = (settings.get("baseModel") or {}).get("modality", "text")
    return CardFacts(
        name=name,
        kind=kind,
        run_id=run.id,
        project=run.project,
        method=run.method,
        engine=run.engine,
        base_model=run.base_model,
        public_name=public,
        hub_revision=revision,
        modality=modality,
        dataset=settings.get("dataset") or {},
        step=step,
        snapshot=snapshot,
        loss=loss,
        reward=reward,
        lineage=_lineage(run),
        rank=config.get("r"),
        alpha=config.get("lora_alpha"),
        modules=list(run.adapter_modules or []),
        settings=settings,
        description=run.description,
        eval_loss=eval_loss,
    )


def _written(facts: CardFacts, run: Run) -> list[Part]:
    card = model_card(facts).encode()
    settings = (json.dumps(published_settings(run.settings or {}), indent=2) + "\n").encode()
    return [Part(CARD, len(card), content=card), Part(SETTINGS, len(settings), content=settings)]


def _figures(
    session: Session, run: Run, snapshot: str | None, step: int
) -> tuple[float | None, float | None]:
    """The loss (sft) and reward (grpo, gspo) the weights were saved at."""
    if snapshot is None:
        return run.summary.loss, run.summary.reward
    row = session.get(Step, (run.id, step))
    figures = Figures.of(row.metrics if row is not None else {})
    return figures.loss, figures.reward_mean


def _eval_loss(session: Session, run: Run, snapshot: str | None, step: int) -> float | None:
    """The evaluation loss the weights were saved with: the run's last (final weights), or the
    last one reported at or before the snapshot's step."""
    if not (run.settings or {}).get("evalDataset"):
        return None
    if snapshot is None and run.summary.eval_loss is not None:
        return run.summary.eval_loss
    rows = session.scalars(
        select(Step).where(Step.run_id == run.id, Step.step <= step).order_by(Step.step.desc())
    )
    for row in rows:
        value = Figures.of(row.metrics or {}).eval_loss
        if value is not None:
            return value
    return None


def _lineage(run: Run) -> str:
    return lineage_text(
        run.source_kind, run.source_run, run.source_snapshot, run.pipeline_id, run.stage
    )


def _stored(ctx: AppContext, prefix: str, skip: set[str]) -> list[Part]:
    out = []
    for key in ctx.blobs.list(prefix):
        path = key[len(prefix) :]
        if path not in skip:
            out.append(Part(path, ctx.blobs.size(key), key=key))
    return out


def _adapter_config(ctx: AppContext, weights: str) -> dict[str, Any]:
    try:
        config: dict[str, Any] = json.loads(ctx.blobs.get_bytes(weights + CONFIG))
    except (OSError, ValueError):
        return {}
    return config


def _step_of(session: Session, run: Run, snapshot: str | None) -> int:
    if snapshot is None:
        return run.observed_step
    snap = session.get(Snapshot, (run.id, snapshot))
    return snap.step if snap is not None else 0


def _catalog_model(ctx: AppContext, model_id: str) -> CatalogModel | None:
    return next((m for m in ctx.catalog if m.id == model_id), None)


def _latest_snapshot(session: Session, run_id: str) -> Snapshot | None:
    return session.scalar(
        select(Snapshot)
        .where(Snapshot.run_id == run_id, Snapshot.swept_at.is_(None))
        .order_by(desc(Snapshot.step))
        .limit(1)
    )


def _snapshot_names(session: Session, run_id: str) -> list[str]:
    return list(
        session.scalars(
            select(Snapshot.name)
            .where(Snapshot.run_id == run_id, Snapshot.swept_at.is_(None))
            .order_by(Snapshot.step)
        )
    )


def _label(run: Run) -> str:
    if run.pipeline_id:
        return f"Run {run.id} (stage {run.stage} of pipeline {run.pipeline_id})"
    return f"Run {run.id}"


def _failure_line(run: Run) -> str:
    try:
        text = failure_text(FailureReason(run.failure_code or ""), run.failure_detail, run.method)
    except ValueError:
        text = run.failure_detail or run.failure_code or ""
    return text.splitlines()[0] if text else ""


def _what(kind: Kind) -> str:
    return "merged model" if kind == "merged" else "adapter"


def _digest(ctx: AppContext, part: Part) -> str:
    if part.content is not None:
        return hashlib.sha256(part.content).hexdigest()
    assert part.key is not None
    digest = hashlib.sha256()
    for chunk in _chunks(ctx, part.key):
        digest.update(chunk)
    return digest.hexdigest()


def _chunks(ctx: AppContext, key: str) -> Iterator[bytes]:
    with ctx.blobs.open(key) as f:
        while chunk := f.read(CHUNK):
            yield chunk
