"""Endpoints (`core.serving`): created as a `SERVE` task that claims its devices like an
evaluation, followed by their phase (read off the task), deleted by cancelling it; and the
front door's question: which endpoint, and which adapter on it, answers a project's `model`."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import desc, select
from sqlalchemy.orm import Session

from akka_training.api.endpoints import EndpointAdapter, EndpointCreate, EndpointRecord
from akka_training.core.errors import (
    AkkaError,
    Conflict,
    InvalidRequest,
    NotFound,
    Problem,
    QuotaExceeded,
)
from akka_training.core.phases import Phase
from akka_training.core.serving import (
    SERVE,
    EndpointPhase,
    ServedAdapter,
    ServeParams,
    endpoint_key,
)
from akka_training.core.states import ClaimState, TaskState
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.services import tasks
from akka_training.server.services.capacity import pool_usage
from akka_training.server.services.lookups import find_run
from akka_training.server.services.plans import catalog_model, model_pin
from akka_training.server.services.projects import held_devices
from akka_training.storage.models import Project, Run, Snapshot, Task
from akka_training.storage.transitions import lock_task, open_task_claim, task_claim

OPEN = (TaskState.PENDING, TaskState.RUNNING)


@dataclass(frozen=True)
class Route:
    """Where the front door sends a request: the endpoint's job and the adapter on it (None:
    the base model), or why it cannot yet (`starting`: the endpoint is not READY)."""

    endpoint: str
    address: str | None
    adapter: str | None
    # What the front door sends with each request (`core.serving.KEY_HEADER`).
    key: str = ""
    # The endpoint's project and name (its metrics' labels).
    project: str = ""
    name: str = ""


def create(
    session: Session, ctx: AppContext, principal: Principal, body: EndpointCreate
) -> EndpointRecord:
    principal.require(body.project)
    if current(session, endpoint_key(body.project, body.name)) is not None:
        raise Conflict(
            f"Project {body.project} has an endpoint {body.name} already; delete it first "
            f"(`akka training endpoints delete {body.name}`) or choose another name."
        )
    problems: list[Problem] = []
    model = catalog_model(ctx, body.base_model, problems)
    if model is None:
        raise InvalidRequest(problems[0].message if problems else "Unknown base model.")
    pool = body.pool or ctx.default_pool
    if pool not in ctx.pool_names:
        raise InvalidRequest(
            f"There is no pool {pool!r}; choose one of {', '.join(ctx.pool_names)} with --pool."
        )
    max_claim = ctx.pool(pool).max_claim
    if body.gpus > max_claim:
        raise InvalidRequest(
            f"The endpoint claims {body.gpus} devices, more than pool {pool} accepts (MAX "
            f"CLAIM {max_claim}); ask for {max_claim} or fewer with --gpus."
        )
    adapters = [_adapter(session, principal, body, ref) for ref in body.adapters]
    idle = body.idle_minutes
    serving = ctx.settings.trainer.endpoints
    params = ServeParams(
        endpoint=body.name,
        base_model=model_pin(model),
        adapters=adapters,
        gpus=body.gpus,
        idle_minutes=serving.idle_minutes if idle is None else idle,
        engine=serving.engine,
        vllm_python=serving.vllm_python,
        max_loras=model.max_loras,
        max_lora_rank=model.max_lora_rank,
    )
    return record(session, _start(session, body.project, pool, params))


def _start(session: Session, project: str, pool: str, params: ServeParams) -> Task:
    """A new serve task for `params`, with its claim on the pool."""
    task = tasks.submit(
        session,
        kind=SERVE,
        project=project,
        pool=pool,
        params=params.to_json(),
        key=endpoint_key(project, params.endpoint),
    )
    open_task_claim(session, task.id, task.project, task.pool, params.gpus)
    session.flush()
    return task


def list_endpoints(
    session: Session, principal: Principal, project: str | None, include_stopped: bool
) -> list[EndpointRecord]:
    principal.refuse_reporters()
    query = select(Task).where(Task.kind == SERVE).order_by(desc(Task.created_at))
    if project:
        principal.require(project)
        query = query.where(Task.project == project)
    elif principal.projects is not None:
        query = query.where(Task.project.in_(principal.projects))
    found = [t for t in session.scalars(query) if include_stopped or live(t)]
    return [record(session, t) for t in found]


def get(session: Session, principal: Principal, project: str, name: str) -> EndpointRecord:
    return record(session, endpoint_for(session, principal, project, name))


def delete(session: Session, principal: Principal, project: str, name: str) -> EndpointRecord:
    task = endpoint_for(session, principal, project, name)
    if idle(task):
        # Its job ended already: only the mark that a request may start it again goes.
        task.result = {**(task.result or {}), "idle": False, "deleted": True}
        return record(session, task)
    tasks.cancel(session, principal, task.id)
    return record(session, task)


def current(session: Session, key: str) -> Task | None:
    """The newest task of the endpoint `key` if it is live (open, or idle)."""
    task = session.scalar(
        select(Task).where(Task.key == key).order_by(desc(Task.created_at)).limit(1)
    )
    return task if task is not None and live(task) else None


def live(task: Task) -> bool:
    """Open and not being deleted, or idle."""
    return (task.state in OPEN and task.requested is None) or idle(task)


def idle(task: Task) -> bool:
    """Its job ended after its idle minutes without a request; a request starts it again."""
    return task.state == TaskState.SUCCEEDED and bool((task.result or {}).get("idle"))


def add_adapter(
    session: Session, principal: Principal, project: str, name: str, ref: str
) -> EndpointRecord:
    """Serve one more adapter on the endpoint; its job loads it while it serves."""
    task = _locked(session, principal, project, name)
    params = ServeParams.model_validate(task.params)
    body = EndpointCreate(project=project, name=name, base_model=params.base_model.id)
    adapter = _adapter(session, principal, body, ref)
    if any(a.name == adapter.name for a in params.adapters):
        raise Conflict(f"Endpoint {name} serves {adapter.name} already.")
    params.adapters.append(adapter)
    task.params = params.to_json()
    return record(session, task)


def remove_adapter(
    session: Session, principal: Principal, project: str, name: str, ref: str
) -> EndpointRecord:
    """Stop serving an adapter (by its name or an alias); its job drops it while it serves."""
    task = _locked(session, principal, project, name)
    params = ServeParams.model_validate(task.params)
    kept = [a for a in params.adapters if ref != a.name and ref not in a.aliases]
    if len(kept) == len(params.adapters):
        served = ", ".join(a.name for a in params.adapters) or "none"
        raise NotFound(f"Endpoint {name} does not serve {ref!r}; it serves: {served}.")
    params.adapters = kept
    task.params = params.to_json()
    return record(session, task)


def _locked(session: Session, principal: Principal, project: str, name: str) -> Task:
    task = lock_task(session, endpoint_for(session, principal, project, name).id)
    if task is None or not live(task):
        raise NotFound(f"Project {project} has no endpoint {name!r}.")
    return task


def endpoint_for(session: Session, principal: Principal, project: str, name: str) -> Task:
    """A project's live endpoint; another project's answers as one that does not exist."""
    principal.refuse_reporters()
    if not principal.can(project):
        raise NotFound(f"Project {project} has no endpoint {name!r}.")
    task = current(session, endpoint_key(project, name))
    if task is None:
        raise NotFound(f"Project {project} has no endpoint {name!r}.")
    return task


def route(session: Session, ctx: AppContext, principal: Principal, model: str) -> Route:
    """The endpoint of the caller's projects that serves `model` (a base model, a run, a run's
    modelName, RUN:SNAPSHOT or RUN:step-N); `NotFound` when none does. `QuotaExceeded` when the
    endpoint must be started (it is idle, or queued) and its project's quota or its pool's
    free devices cannot admit it now."""
    for task in _live_endpoints(session, principal):
        params = ServeParams.model_validate(task.params)
        adapter: str | None = None
        if model != params.base_model.id:
            named = [a.name for a in params.adapters if model == a.name or model in a.aliases]
            if not named:
                continue
            adapter = named[0]
        if idle(task):
            # The first request after its idle minutes starts it again, if it can be admitted.
            refuse_unadmitted(session, ctx, task.project, task.pool, params.gpus, model)
            task.result = {**(task.result or {}), "idle": False, "woken": True}
            task = _start(session, task.project, task.pool, params)
        else:
            claim = task_claim(session, task.id)
            if claim is not None and claim.state == ClaimState.QUEUED:
                refuse_unadmitted(session, ctx, task.project, task.pool, params.gpus, model)
        key = str((task.progress or {}).get("key", ""))
        return Route(task.id, _address(task), adapter, key, task.project, params.endpoint)
    raise NotFound(
        f"The model {model!r} does not exist or no endpoint of your projects serves it; "
        "create one with `akka training endpoints create`."
    )


def refuse_unadmitted(
    session: Session, ctx: AppContext, project: str, pool: str, devices: int, model: str
) -> None:
    """`QuotaExceeded`, saying which limit and what to do, when a claim of `devices` on `pool`
    for `project` (the endpoint serving `model`) could not be granted now."""
    quota = session.scalar(select(Project.quota).where(Project.name == project))
    held, _ = held_devices(session, project)
    if quota is not None and held + devices > quota:
        raise QuotaExceeded(
            f"Project {project}'s quota is {quota} device(s) and it holds {held}: the endpoint "
            f"serving {model} needs {devices} more to start. Free some (`akka training capacity "
            f"--project {project}` shows what holds them; delete an endpoint or cancel a run) "
            "or ask an admin to raise the quota.",
            reason="quota",
        )
    free = next((p.free for p in pool_usage(session, ctx) if p.name == pool), None)
    if free is not None and free < devices:
        raise QuotaExceeded(
            f"Pool {pool} has {free} device(s) free: the endpoint serving {model} needs "
            f"{devices} to start. Try again when runs or endpoints give devices back "
            f"(`akka training capacity` shows the pool), or serve it from another pool.",
            reason="pool",
        )


def served_models(session: Session, principal: Principal) -> list[tuple[str, str]]:
    """(model name, project) of every model the caller's live endpoints serve, by every name a
    request may give it (an adapter's aliases too)."""
    out: list[tuple[str, str]] = []
    for task in _live_endpoints(session, principal):
        params = ServeParams.model_validate(task.params)
        out.append((params.base_model.id, task.project))
        out += [(n, task.project) for a in params.adapters for n in (a.name, *a.aliases)]
    return out


def _live_endpoints(session: Session, principal: Principal) -> list[Task]:
    """The caller's projects' live endpoints, oldest first."""
    principal.refuse_reporters()
    query = select(Task).where(Task.kind == SERVE, Task.state.in_([*OPEN, TaskState.SUCCEEDED]))
    if principal.projects is not None:
        query = query.where(Task.project.in_(principal.projects))
    return [t for t in session.scalars(query.order_by(Task.created_at)) if live(t)]


def record(session: Session, task: Task) -> EndpointRecord:
    params = ServeParams.model_validate(task.params)
    claim = task_claim(session, task.id)
    return EndpointRecord(
        id=task.id,
        project=task.project,
        name=params.endpoint,
        phase=phase(task, claim.state if claim is not None else None),
        base_model=params.base_model.id,
        adapters=[
            EndpointAdapter(name=a.name, run=a.run, snapshot=a.snapshot, aliases=a.aliases)
            for a in params.adapters
        ],
        gpus=params.gpus,
        pool=task.pool,
        idle_minutes=params.idle_minutes,
        engine=_engine(task),
        failure=task.failure,
        created_at=task.created_at,
        started_at=task.started_at,
        ended_at=task.ended_at,
    )


def phase(task: Task, claim_state: str | None) -> EndpointPhase:
    if task.state == TaskState.FAILED:
        return EndpointPhase.FAILED
    if idle(task):
        return EndpointPhase.IDLE
    if task.state not in OPEN or task.requested is not None:
        return EndpointPhase.STOPPED
    if claim_state == ClaimState.QUEUED:
        return EndpointPhase.QUEUED
    if _address(task) is None:
        return EndpointPhase.STARTING
    return EndpointPhase.READY


def _engine(task: Task) -> str | None:
    """The engine its job said serves it (vllm, transformers); None before it said."""
    engine = (task.progress or {}).get("engine")
    return str(engine) if engine else None


def _address(task: Task) -> str | None:
    if task.state != TaskState.RUNNING or not task.progress:
        return None
    address = task.progress.get("address")
    return str(address) if address else None


def _adapter(
    session: Session, principal: Principal, body: EndpointCreate, ref: str
) -> ServedAdapter:
    run_ref, _, snapshot = ref.partition(":")
    named = session.scalar(
        select(Run).where(Run.project == body.project, Run.model_name == ref).limit(1)
    )
    if named is not None:
        run, snapshot = named, ""
    else:
        try:
            run = find_run(session, run_ref, principal)
        except AkkaError:
            raise NotFound(
                f"There is no run or modelName {ref!r} in project {body.project}."
            ) from None
    if run.project != body.project:
        raise NotFound(f"There is no run or modelName {ref!r} in project {body.project}.")
    if run.base_model != body.base_model:
        raise InvalidRequest(
            f"Run {run.id} trained an adapter of {run.base_model}, not {body.base_model}; "
            f"serve it on an endpoint of {run.base_model}."
        )
    aliases = [run.model_name] if run.model_name and not snapshot else []
    if not snapshot:
        if run.phase != Phase.COMPLETED or not run.adapter:
            raise Conflict(
                f"Run {run.id} has no final adapter (it is {run.phase}); wait for it to "
                f"complete, or serve one of its snapshots ({run.id}:SNAPSHOT)."
            )
        return ServedAdapter(name=run.id, run=run.id, weights=str(run.adapter), aliases=aliases)
    snap = session.get(Snapshot, (run.id, snapshot))
    if snap is None and snapshot.startswith("step-"):
        snap = session.scalar(
            select(Snapshot).where(
                Snapshot.run_id == run.id, Snapshot.step == int(snapshot[5:] or -1)
            )
        )
    if snap is None or snap.swept_at is not None:
        raise NotFound(f"Run {run.id} has no snapshot {snapshot!r}.")
    name = f"{run.id}:{snap.name}"
    return ServedAdapter(
        name=name,
        run=run.id,
        snapshot=snap.name,
        weights=str(snap.weights),
        aliases=sorted({f"{run.id}:step-{snap.step}"} - {name}),
    )
