"""What a job is started with: its spec (the resolved settings, the snapshot to resume from,
where to report) and a one-time bootstrap credential, which the job exchanges at its start for
its token and the store's credentials (`server/services/job_credentials.py`), so that neither
is ever in what a backend records of the launch.

`job_addresses` and `job_env` are what every job is started with, a run's attempt or a task
(`controller.tasks`): where it reports and reads the store, and its environment."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select

from akka_training.backends.base import LaunchRequest
from akka_training.config.settings import Settings as TrainerSettings
from akka_training.core.interactive import (
    INTERACTIVE_JOB,
    INTERACTIVE_METHOD,
    InteractiveJobSpec,
    InteractiveSettings,
)
from akka_training.core.resolved import (
    BOOTSTRAP_ENV,
    Generation,
    JobSpec,
    ResumePoint,
    Settings,
    Telemetry,
)
from akka_training.core.states import AttemptState, ClaimState
from akka_training.core.storage import S3Options
from akka_training.deployment.context import AppContext
from akka_training.storage.models import Attempt, Claim, Run, Snapshot
from akka_training.storage.tokens import create_bootstrap_token
from akka_training.telemetry.tracing import TRACEPARENT_ENV

SCRIPTED_JOB = "akka_training.testing.scripted_job"


@dataclass(frozen=True)
class JobAddresses:
    """Where a job reaches the service and the blob store."""

    trainer_url: str
    storage_url: str
    storage_s3: S3Options


def job_addresses(settings: TrainerSettings) -> JobAddresses:
    """The service's and the store's addresses as a job sees them: under Ray, the addresses
    `trainer.ray` gives for the cluster's nodes when it gives them, else the service's own."""
    ray = settings.trainer.ray if settings.trainer.backend == "ray" else None
    return JobAddresses(
        trainer_url=ray.trainer_url if ray and ray.trainer_url else settings.trainer_url,
        storage_url=ray.storage_url if ray and ray.storage_url else settings.storage_url,
        storage_s3=settings.trainer.storage.s3.options(),
    )


def bootstrap_lifetime(settings: TrainerSettings) -> timedelta:
    """How long a launched job's bootstrap credential works (trainer.controller.bootstrap-seconds)."""
    return timedelta(seconds=settings.trainer.controller.bootstrap_seconds)


def job_env(bootstrap_env: str, bootstrap: str, traceparent: str | None) -> dict[str, str]:
    """A job's environment: its one-time bootstrap credential under `bootstrap_env` and the trace
    it joins. No token and no store credential: the job gets those by the exchange."""
    env = {bootstrap_env: bootstrap}
    if traceparent:
        env[TRACEPARENT_ENV] = traceparent
    return env


def prepare_launch(
    ctx: AppContext, run_id: str, number: int, traceparent: str | None = None
) -> LaunchRequest | None:
    """A launch request for the attempt, with a fresh bootstrap credential; None if the attempt
    moved on."""
    with ctx.db.session() as session:
        run = session.get(Run, run_id)
        attempt = session.get(Attempt, (run_id, number))
        if run is None or attempt is None or attempt.state != AttemptState.PENDING:
            return None
        claim = session.scalar(
            select(Claim).where(Claim.run_id == run_id, Claim.state == ClaimState.GRANTED)
        )
        if claim is None:
            return None
        resume = None
        if attempt.resume_snapshot:
            snap = session.get(Snapshot, (run_id, attempt.resume_snapshot))
            if snap is not None and snap.training_state:
                resume = ResumePoint(
                    snapshot=snap.name,
                    step=snap.step,
                    weights=snap.weights,
                    training_state=snap.training_state,
                )
        settings = ctx.settings
        bootstrap = create_bootstrap_token(
            session,
            run.project,
            ctx.clock.now(),
            bootstrap_lifetime(settings),
            run_id=run_id,
            attempt=number,
        )
        addresses = job_addresses(settings)
        if run.method == INTERACTIVE_METHOD:
            return _interactive_launch(run, number, claim, addresses, settings, bootstrap)
        reinforcement = settings.trainer.reinforcement
        spec = JobSpec(
            run_id=run_id,
            attempt=number,
            project=run.project,
            model_name=run.model_name,
            pipeline=run.pipeline_id,
            stage=run.stage,
            trainer_url=addresses.trainer_url,
            storage_url=addresses.storage_url,
            storage_s3=addresses.storage_s3,
            settings=Settings.model_validate(run.settings),
            resume=resume,
            telemetry=Telemetry(
                collector_endpoint=settings.trainer.telemetry.collector_endpoint,
                traceparent=traceparent or run.traceparent,
                stall_seconds=settings.trainer.controller.stall_seconds,
                report_seconds=settings.trainer.controller.report_seconds,
                mlflow_uri=settings.trainer.tracking.mlflow_uri,
            ),
            generation=Generation(
                engine=reinforcement.trl_generation,
                vllm_gpu_memory_utilization=reinforcement.vllm_gpu_memory_utilization,
                vllm_sleep_mode=reinforcement.vllm_sleep_mode,
            ),
        )
        envelope = None
        for model in ctx.catalog:
            if model.id == run.base_model:
                envelope = model.envelope(run.method, ctx.engine, run.gpus, ctx.image_text_rl)
        host_memory = None
        if settings.trainer.local.enforce_host_memory and envelope and envelope.host_memory_gib:
            host_memory = math.ceil(envelope.host_memory_gib * 2**30)
        env = job_env(BOOTSTRAP_ENV, bootstrap, spec.telemetry.traceparent)
        verl_python = settings.trainer.reinforcement.verl_python
        if verl_python:
            env["AKKA_VERL_PYTHON"] = verl_python
        return LaunchRequest(
            run_id=run_id,
            attempt=number,
            pool=claim.pool,
            devices=claim.devices,
            device_ids=[int(i) for i in claim.device_ids],
            job_spec=spec.to_json(),
            env=env,
            host_memory_bytes=host_memory,
            entry_module=SCRIPTED_JOB
            if settings.trainer.testing.scripted_jobs
            else "akka_training.engines.job",
        )


def _interactive_launch(
    run: Run,
    number: int,
    claim: Claim,
    addresses: JobAddresses,
    settings: TrainerSettings,
    bootstrap: str,
) -> LaunchRequest:
    """The launch of an interactive run's attempt (`core.interactive`): its own spec and job
    module, on the same backends, with the same one-time credential, as every run's."""
    spec = InteractiveJobSpec(
        run_id=run.id,
        attempt=number,
        project=run.project,
        trainer_url=addresses.trainer_url,
        storage_url=addresses.storage_url,
        storage_s3=addresses.storage_s3,
        settings=InteractiveSettings.model_validate(run.settings),
        telemetry=Telemetry(
            collector_endpoint=settings.trainer.telemetry.collector_endpoint,
            traceparent=run.traceparent,
            stall_seconds=settings.trainer.controller.stall_seconds,
            report_seconds=settings.trainer.controller.report_seconds,
        ),
    )
    return LaunchRequest(
        run_id=run.id,
        attempt=number,
        pool=claim.pool,
        devices=claim.devices,
        device_ids=[int(i) for i in claim.device_ids],
        job_spec=spec.to_json(),
        env=job_env(BOOTSTRAP_ENV, bootstrap, run.traceparent),
        entry_module=INTERACTIVE_JOB,
    )
