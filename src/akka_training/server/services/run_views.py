"""A run as `runs get` shows it: State, Results, Data fit, Memory, Cost, Health, Preference,
Failure, Queue, Settings."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import desc, func, select
from sqlalchemy.orm import Session

from akka_training.api.runs import (
    Cost,
    DataFit,
    Failure,
    Health,
    HealthMonitor,
    MemorySplit,
    MonitorPause,
    Preference,
    Progress,
    Queue,
    Results,
    RunRecord,
    RunSource,
    RunSummary,
    Stalled,
)
from akka_training.core.failures import FailureReason, failure_text
from akka_training.core.monitors import verdicts
from akka_training.core.phases import TERMINAL, Phase
from akka_training.core.plans import Monitors
from akka_training.core.resolved import recorded_reference
from akka_training.core.states import ClaimState
from akka_training.deployment.context import AppContext
from akka_training.server.services.projects import held_devices
from akka_training.storage.models import Claim, Project, Run
from akka_training.storage.transitions import held_until


def run_summary(run: Run) -> RunSummary:
    """The run as `runs list` shows it."""
    return RunSummary(
        id=run.id,
        project=run.project,
        model_name=run.model_name,
        description=run.description,
        method=run.method,
        engine=run.engine,
        base_model=run.base_model,
        dataset=run.dataset,
        phase=run.phase,
        phase_since=run.phase_since,
        progress=Progress(
            observed_step=run.observed_step,
            total_steps=run.total_steps,
            saved_step=run.saved_step,
        ),
        attempt=run.attempt,
        requested=run.requested,
        pool=run.pool,
        gpus=run.gpus,
        created_at=run.created_at,
        started_at=run.started_at,
        ended_at=run.ended_at,
        pipeline=run.pipeline_id,
        stage=run.stage,
        source=(
            RunSource(run=run.source_run, snapshot=run.source_snapshot, kind=run.source_kind)
            if run.source_run
            else None
        ),
        failure=_failure(run),
    )


def run_record(session: Session, ctx: AppContext, run: Run, existing: bool = False) -> RunRecord:
    """The run as `runs get` shows it; `existing`: the answer to a resubmission."""
    now = ctx.clock.now()
    figures = run.summary
    return RunRecord(
        **dict(run_summary(run)),
        results=Results(
            model=run.adapter,
            training_loss=figures.loss,
            reward=figures.reward,
            adapter_modules=run.adapter_modules,
        ),
        data_fit=_data_fit(run),
        memory=MemorySplit.model_validate(run.memory) if run.memory is not None else None,
        cost=_cost(session, run, now),
        queue=_queue(session, ctx, run) if run.phase == Phase.QUEUED else None,
        stalled=(
            Stalled(since=run.stalled_since, dump=run.stall_dump) if run.stalled_since else None
        ),
        health=_health(run),
        preference=_preference(run),
        settings=run.settings,
        existing=existing,
    )


def _health(run: Run) -> Health | None:
    """The latest step's monitor figures against their thresholds, and the pause a monitor
    caused (while the run is paused by it, and after, as the last one)."""
    latest, pause = run.summary.health, run.summary.monitor_pause
    if latest is None and pause is None:
        return None
    monitors = _monitors(run.settings)
    figures = dict(latest.figures) if latest is not None else {}
    rows = [
        HealthMonitor(
            monitor=v.spec.name,
            figure=v.spec.figure,
            value=v.value,
            threshold=v.threshold,
            direction=v.spec.direction,
            crossed=v.crossed,
            pauses_run=v.spec.name in monitors.pause_on,
        )
        for v in verdicts(figures, monitors)
    ]
    return Health(
        step=latest.step if latest is not None else None,
        monitors=rows,
        figures=figures,
        pause=(
            MonitorPause(
                monitor=pause.monitor,
                figure=pause.figure,
                value=pause.value,
                threshold=pause.threshold,
                step=pause.step,
                reason=pause.reason,
            )
            if pause is not None
            else None
        ),
    )


def _preference(run: Run) -> Preference | None:
    """The latest step's preference figures (dpo runs)."""
    latest = run.summary.preference
    if latest is None:
        return None
    f = latest.figures
    return Preference(
        step=latest.step,
        rewards_chosen=f.get("rewards/chosen"),
        rewards_rejected=f.get("rewards/rejected"),
        rewards_margins=f.get("rewards/margins"),
        rewards_accuracies=f.get("rewards/accuracies"),
        logps_chosen=f.get("logps/chosen"),
        logps_rejected=f.get("logps/rejected"),
        reference=recorded_reference(run.settings or {}).describe(),
    )


def _monitors(settings: dict[str, Any] | None) -> Monitors:
    raw = ((settings or {}).get("config") or {}).get("monitors")
    try:
        return Monitors.model_validate(raw) if raw else Monitors()
    except ValueError:
        return Monitors()  # settings of an older or newer service: the defaults


def _failure(run: Run) -> Failure | None:
    if not run.failure_code:
        return None
    try:
        reason = failure_text(FailureReason(run.failure_code), run.failure_detail, run.method)
    except ValueError:
        reason = run.failure_detail or run.failure_code
    return Failure(code=run.failure_code, reason=reason, first_line=reason.splitlines()[0])


def _data_fit(run: Run) -> DataFit | None:
    """How the data fit, as the job counted it, with the padding share its steps measured."""
    if run.data_fit is None:
        return None
    fit = DataFit.model_validate(run.data_fit)
    padding = run.summary.padding_share
    return fit if padding is None else fit.model_copy(update={"padding_share": padding})


def _cost(session: Session, run: Run, now: datetime) -> Cost:
    phase_seconds = dict(run.phase_seconds or {})
    if Phase(run.phase) not in TERMINAL:
        phase_seconds[run.phase] = round(
            phase_seconds.get(run.phase, 0.0) + (now - run.phase_since).total_seconds(), 3
        )
    gpu_seconds = run.gpu_seconds or 0.0
    held = session.scalar(
        select(Claim).where(Claim.run_id == run.id, Claim.state == ClaimState.GRANTED)
    )
    if held is not None and held.granted_at is not None:
        # The clock stops when the run ends, even while its job is still exiting.
        until = held_until(run, now)
        gpu_seconds += max(0.0, (until - held.granted_at).total_seconds()) * held.devices
    end = run.ended_at or now
    return Cost(
        gpu_seconds=round(gpu_seconds, 1),
        duration_seconds=round((end - run.created_at).total_seconds(), 1),
        phase_seconds=phase_seconds,
        tokens_per_second=run.summary.tokens_per_second,
        mfu=run.summary.mfu,
    )


def _queue(session: Session, ctx: AppContext, run: Run) -> Queue | None:
    claim = session.scalar(
        select(Claim)
        .where(Claim.run_id == run.id, Claim.state == ClaimState.QUEUED)
        .order_by(desc(Claim.id))
    )
    return claim_queue(session, ctx, claim) if claim is not None else None


def claim_queue(session: Session, ctx: AppContext, claim: Claim) -> Queue:
    """Where a QUEUED claim (a run's or an evaluation's) stands in its pool, and what it waits
    for: its project's quota, claims ahead of it, free devices."""
    ahead = session.scalar(
        select(func.count()).where(
            Claim.pool == claim.pool, Claim.state == ClaimState.QUEUED, Claim.id < claim.id
        )
    )
    granted = session.scalar(
        select(func.coalesce(func.sum(Claim.devices), 0)).where(
            Claim.pool == claim.pool, Claim.state == ClaimState.GRANTED
        )
    )
    pool = ctx.pool(claim.pool)
    free = max(0, pool.declared - int(granted or 0))
    project = session.get(Project, claim.project)
    held, _ = held_devices(session, claim.project)
    waiting = []
    if project is not None and project.quota is not None and held + claim.devices > project.quota:
        waiting.append(
            f"quota: project {claim.project} holds {held} of its {project.quota} device(s)"
        )
    if int(ahead or 0) > 0:
        waiting.append(f"{ahead} claim(s) ahead in pool {claim.pool}")
    if free < claim.devices:
        waiting.append(f"devices: needs {claim.devices}, pool {claim.pool} has {free} free")
    return Queue(
        position=int(ahead or 0) + 1,
        pool=claim.pool,
        devices=claim.devices,
        free=free,
        quota=project.quota if project else None,
        held=held,
        waiting_for=waiting or ["the controller's next pass"],
    )
