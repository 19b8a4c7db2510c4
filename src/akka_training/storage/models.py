"""Tables. JSON columns hold documents the service reads whole (plans, settings, metrics)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from akka_training.core.run_figures import RunFigures
from akka_training.core.states import AttemptState, ClaimState, TaskState


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """Timestamps stored as UTC and always read back timezone-aware (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class RunFiguresJSON(TypeDecorator[RunFigures]):
    """`runs.summary`: a `RunFigures` stored as its JSON (the keys rows have always held); a
    row without one reads as an empty one."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: RunFigures | None, dialect: Any) -> Any:
        return None if value is None else value.to_json()

    def process_result_value(self, value: Any, dialect: Any) -> RunFigures:
        return RunFigures.model_validate(value or {})


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UtcDateTime(), dict[str, Any]: JSON, list[Any]: JSON}


class Project(Base):
    __tablename__ = "projects"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    description: Mapped[str | None] = mapped_column(Text)
    # Devices the project may hold at once; None: no limit.
    quota: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Token(Base):
    """A credential. `kind`: admin (every project), project (the listed ones), access (a
    short-lived token exchanged from a login), job (one attempt of one run), task (one task),
    bootstrap (a job's or a task's one-time credential, exchanged for its token at its start)."""

    __tablename__ = "tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    projects: Mapped[list[Any]] = mapped_column(default=list)
    run_id: Mapped[str | None] = mapped_column(String(32))
    attempt: Mapped[int | None] = mapped_column(Integer)
    task_id: Mapped[str | None] = mapped_column(String(32))
    parent_id: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column()
    revoked_at: Mapped[datetime | None] = mapped_column()
    last_used_at: Mapped[datetime | None] = mapped_column()


class DatasetVersion(Base):
    __tablename__ = "dataset_versions"
    __table_args__ = (
        UniqueConstraint("project", "name", "version"),
        UniqueConstraint("project", "name", "sha256"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    blob: Mapped[str] = mapped_column(String(512))
    bytes: Mapped[int] = mapped_column(BigInteger)
    rows: Mapped[int] = mapped_column(Integer)
    format: Mapped[str] = mapped_column(String(32))
    has_images: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class DatasetAlias(Base):
    """A movable name for a version: ``PROJECT/NAME:ALIAS``."""

    __tablename__ = "dataset_aliases"
    project: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Bundle(Base):
    __tablename__ = "bundles"
    __table_args__ = (
        UniqueConstraint("project", "name", "version"),
        UniqueConstraint("project", "name", "sha256"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    blob: Mapped[str] = mapped_column(String(512))
    bytes: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Pipeline(Base):
    __tablename__ = "pipelines"
    __table_args__ = (UniqueConstraint("project", "submission_id"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    name: Mapped[str | None] = mapped_column(String(128))
    description: Mapped[str | None] = mapped_column(Text)
    submission_id: Mapped[str | None] = mapped_column(String(128))
    plan: Mapped[dict[str, Any]] = mapped_column()
    # RUNNING, COMPLETED, FAILED, CANCELLED
    state: Mapped[str] = mapped_column(String(16), default="RUNNING")
    failure: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column()


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("project", "submission_id"),
        Index("ix_runs_phase", "phase"),
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    model_name: Mapped[str | None] = mapped_column(String(128))
    description: Mapped[str | None] = mapped_column(Text)
    submission_id: Mapped[str | None] = mapped_column(String(128))
    method: Mapped[str] = mapped_column(String(8))
    engine: Mapped[str] = mapped_column(String(8))
    base_model: Mapped[str] = mapped_column(String(128))
    dataset: Mapped[str] = mapped_column(String(256))  # PROJECT/NAME:vN
    pool: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer)
    plan: Mapped[dict[str, Any]] = mapped_column()
    settings: Mapped[dict[str, Any]] = mapped_column()
    source_run: Mapped[str | None] = mapped_column(String(32), index=True)
    source_snapshot: Mapped[str | None] = mapped_column(String(64))
    source_kind: Mapped[str | None] = mapped_column(String(16))
    pipeline_id: Mapped[str | None] = mapped_column(ForeignKey("pipelines.id"), index=True)
    stage: Mapped[str | None] = mapped_column(String(64))

    phase: Mapped[str] = mapped_column(String(16))
    phase_since: Mapped[datetime] = mapped_column(default=utcnow)
    # Seconds spent in each phase so far, by phase name.
    phase_seconds: Mapped[dict[str, Any]] = mapped_column(default=dict)
    failure_code: Mapped[str | None] = mapped_column(String(32))
    failure_detail: Mapped[str | None] = mapped_column(Text)
    # What the user asked for and the controller has not finished: pause-save, pause-latest,
    # cancel.
    requested: Mapped[str | None] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    observed_step: Mapped[int] = mapped_column(Integer, default=0)
    saved_step: Mapped[int | None] = mapped_column(Integer)
    total_steps: Mapped[int | None] = mapped_column(Integer)
    data_fit: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    adapter_modules: Mapped[list[Any] | None] = mapped_column(JSON)
    adapter: Mapped[str | None] = mapped_column(String(512))
    # The run's figures (`core.run_figures`): frozen, so a change is a new value assigned here,
    # which is what the column notices.
    summary: Mapped[RunFigures] = mapped_column(RunFiguresJSON, nullable=True, default=RunFigures)
    memory: Mapped[dict[str, Any] | None] = mapped_column(
        JSON
    )  # split of the step that reserved most
    last_step_at: Mapped[datetime | None] = mapped_column()
    stalled_since: Mapped[datetime | None] = mapped_column()
    stall_dump: Mapped[str | None] = mapped_column(String(512))
    gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column()
    ended_at: Mapped[datetime | None] = mapped_column()
    traceparent: Mapped[str | None] = mapped_column(String(64))


class Attempt(Base):
    """One execution of a run on the cluster. `state`: pending (not launched), launched (the
    backend took it), exited (gone, for whatever reason)."""

    __tablename__ = "attempts"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[str] = mapped_column(String(16), default=AttemptState.PENDING)
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    launch_tries: Mapped[int] = mapped_column(Integer, default=0)
    next_try_at: Mapped[datetime | None] = mapped_column()
    last_error: Mapped[str | None] = mapped_column(Text)
    resume_snapshot: Mapped[str | None] = mapped_column(String(64))
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    outcome: Mapped[str | None] = mapped_column(String(16))  # finished, stopped, failed, lost
    stop_sent: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    launched_at: Mapped[datetime | None] = mapped_column()
    started_at: Mapped[datetime | None] = mapped_column()
    heartbeat_at: Mapped[datetime | None] = mapped_column()
    ended_at: Mapped[datetime | None] = mapped_column()


class Claim(Base):
    """Devices requested by (QUEUED) or granted to (GRANTED) one run, or one task (`kind`
    ``evaluation``: `task_id`), in one pool."""

    __tablename__ = "claims"
    __table_args__ = (Index("ix_claims_pool_state", "pool", "state"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16), default="run")
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"), index=True)
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id"), index=True)
    project: Mapped[str] = mapped_column(String(64))
    pool: Mapped[str] = mapped_column(String(64))
    devices: Mapped[int] = mapped_column(Integer)
    device_ids: Mapped[list[Any]] = mapped_column(default=list)
    state: Mapped[str] = mapped_column(String(16), default=ClaimState.QUEUED)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    granted_at: Mapped[datetime | None] = mapped_column()
    released_at: Mapped[datetime | None] = mapped_column()


class Snapshot(Base):
    __tablename__ = "snapshots"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    step: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    weights: Mapped[str] = mapped_column(String(512))
    training_state: Mapped[str | None] = mapped_column(String(512))
    weights_bytes: Mapped[int | None] = mapped_column(BigInteger)
    training_state_bytes: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    swept_at: Mapped[datetime | None] = mapped_column()


class Step(Base):
    __tablename__ = "steps"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RolloutStep(Base):
    """Where one step's rollouts lie (one file in the blob store) and its extremes."""

    __tablename__ = "rollout_steps"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    blob: Mapped[str] = mapped_column(String(512))
    count: Mapped[int] = mapped_column(Integer)
    best_score: Mapped[float | None] = mapped_column(Float)
    worst_score: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Event(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Task(Base):
    """A job on the cluster that is not a training run (`core.tasks`). `key` names what the
    task makes (``merge:RUN:final``), so that asking twice finds the first task."""

    __tablename__ = "tasks"
    __table_args__ = (Index("ix_tasks_state", "state"), Index("ix_tasks_key", "key"))
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"), index=True)
    key: Mapped[str | None] = mapped_column(String(256))
    # The pool whose nodes run the task's job (on Ray: where the base model's files are).
    pool: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state: Mapped[str] = mapped_column(String(16), default=TaskState.PENDING)
    requested: Mapped[str | None] = mapped_column(String(16))  # cancel
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    launch_tries: Mapped[int] = mapped_column(Integer, default=0)
    next_try_at: Mapped[datetime | None] = mapped_column()
    last_error: Mapped[str | None] = mapped_column(Text)
    stop_sent: Mapped[bool] = mapped_column(Boolean, default=False)
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The latest progress report: {message, done, total}.
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The W3C traceparent of the span the task was submitted in (an evaluation's
    # evaluation.submit): its job's spans join that trace.
    traceparent: Mapped[str | None] = mapped_column(String(64))
    # Set when the job reported its end (finished, failed): the controller then only waits
    # for the job to exit.
    reported: Mapped[bool] = mapped_column(Boolean, default=False)
    failure: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    launched_at: Mapped[datetime | None] = mapped_column()
    started_at: Mapped[datetime | None] = mapped_column()
    heartbeat_at: Mapped[datetime | None] = mapped_column()
    ended_at: Mapped[datetime | None] = mapped_column()


class Lease(Base):
    """Leadership of the controller on databases without advisory locks."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[datetime] = mapped_column()


class TinkerSession(Base):
    """A session of the Tinker API (a `tinker.ServiceClient`), kept here so that it outlives the
    service process that made it: any replica, or the same trainer after a restart, answers its
    heartbeats and requests. `ended` says how it ended: ``closed`` (its client closed it) or
    ``expired`` (no heartbeat for ``trainer.tinker.heartbeat-seconds``)."""

    __tablename__ = "tinker_sessions"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"), index=True)
    # The token whose key created it.
    token_id: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    beat_at: Mapped[datetime] = mapped_column()
    ended: Mapped[str | None] = mapped_column(String(16))
    ended_at: Mapped[datetime | None] = mapped_column()


class TinkerClient(Base):
    """A training client of a Tinker session: its run, and the model id the SDK named it by
    when that is not the run id (``SESSION:train:SEQ``, a client made from saved weights)."""

    __tablename__ = "tinker_clients"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("tinker_sessions.id"), index=True)
    model_id: Mapped[str | None] = mapped_column(String(96), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TinkerSampler(Base):
    """A sampling client of a Tinker session (``RUN:sampler:ADAPTER``): answered by RUN's job,
    so it is routed again after a restart for as long as that job lives."""

    __tablename__ = "tinker_samplers"
    session_id: Mapped[str] = mapped_column(ForeignKey("tinker_sessions.id"), primary_key=True)
    sampler_id: Mapped[str] = mapped_column(String(512), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
