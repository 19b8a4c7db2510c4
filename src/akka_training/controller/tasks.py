"""Tasks (`core.tasks`): each pass launches the pending ones through the backend and watches
the running ones, like a run's attempts but simpler: one attempt, ended by its own report
(SUCCEEDED, FAILED) or, when its job exits without one, FAILED with the job's last words. A
cancel stops the job and ends the task once the job is gone.

Most tasks hold no claim (their job runs on the CPUs of a node of their pool). An evaluation
claims devices like a run (`storage.transitions.open_task_claim`): it is launched only once the
scheduler granted its claim (the loop's admission pass), on the granted devices, and its claim
is released once its job is gone, whatever ended it (a report, a failure, a cancel).

`decide` is the pure part (a view and what the cluster said in, a `TaskDecision` out);
`reconcile_tasks` loads, decides and applies, each in its own short transaction, with every
cluster call outside them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import or_, select

from akka_training.backends.base import (
    ClusterUnreachable,
    JobStatus,
    LaunchRefused,
    LaunchRequest,
)
from akka_training.controller.launch import bootstrap_lifetime, job_addresses, job_env
from akka_training.controller.views import Limits
from akka_training.core.serving import SERVE
from akka_training.core.states import (
    OPEN_CLAIM_STATES,
    TASK_RULES,
    TERMINAL_TASK_STATES,
    ClaimState,
    TaskRule,
    TaskState,
)
from akka_training.core.tasks import BOOTSTRAP_ENV, TaskSpec, TaskTelemetry
from akka_training.deployment.context import AppContext
from akka_training.storage.models import Claim, Task
from akka_training.storage.tokens import create_bootstrap_token
from akka_training.storage.transitions import lock_task, move_task, release_task_claim, task_claim

log = logging.getLogger(__name__)

TASK_JOB = "akka_training.engines.tasks.job"
# A task has one attempt: the same pair (task id, 1) always names its one job.
ATTEMPT = 1
# Kinds of task that run until cancelled: a job that dies is launched again, not failed.
LONG_LIVED = frozenset({SERVE})


@dataclass(frozen=True)
class TaskView:
    id: str
    state: str
    requested: str | None
    handle: dict[str, Any] | None
    launch_tries: int
    next_try_at: datetime | None
    reported: bool
    stop_sent: bool
    # Its open claim's state (QUEUED, GRANTED), None when it holds none.
    claim_state: str | None = None
    kind: str = ""


@dataclass(frozen=True)
class TaskDecision:
    launch: bool = False
    stop_job: bool = False
    # End the task under this rule (CANCEL, FAIL) with this sentence (FAIL) and detail.
    end: TaskRule | None = None
    failure: str | None = None
    detail: str | None = None
    # The task has ended and its job is gone (or never ran): give its devices back.
    release_claim: bool = False
    # A long-lived task's job died: launch it again, on the devices it holds.
    relaunch: bool = False


def decide(view: TaskView, status: JobStatus | None, log_tail: str, now: datetime) -> TaskDecision:
    """What to do for one open task this pass. `status` is None when the job was not asked
    about (not launched) or the cluster did not answer."""
    cancelling = view.requested == "cancel"
    holds = view.claim_state is not None
    if view.state in TERMINAL_TASK_STATES:
        # Ended (by its report, or while it never ran): its claim goes once its job is gone.
        if not holds:
            return TaskDecision()
        if view.handle is None or (status is not None and status.state in ("exited", "missing")):
            return TaskDecision(release_claim=True)
        return TaskDecision()
    if view.state == TaskState.PENDING and view.handle is None:
        if cancelling:
            return TaskDecision(end=TaskRule.CANCEL, release_claim=holds)
        if view.claim_state == ClaimState.QUEUED:
            return TaskDecision()  # waiting for devices, like a QUEUED run
        if view.next_try_at is None or view.next_try_at <= now:
            return TaskDecision(launch=True)
        return TaskDecision()
    if status is None:
        return TaskDecision()
    gone = status.state in ("exited", "missing")
    if not gone:
        if cancelling and not view.stop_sent:
            return TaskDecision(stop_job=True)
        return TaskDecision()
    if view.reported:
        # Its report ended it; the job is gone too.
        return TaskDecision(release_claim=holds)
    if cancelling:
        return TaskDecision(end=TaskRule.CANCEL, release_claim=holds)
    if view.kind in LONG_LIVED:
        return TaskDecision(relaunch=True)
    return TaskDecision(
        release_claim=holds,
        end=TaskRule.FAIL,
        failure="this task's job ended without reporting its result ("
        + _how(status)
        + "); its last lines of output are in the detail",
        detail=_last_lines(log_tail, 15) or None,
    )


def reconcile_tasks(ctx: AppContext, limits: Limits) -> bool:
    """One pass over every open task, and every ended one whose claim is still open; whether
    there was any."""
    with ctx.db.session() as session:
        claims = {
            c.task_id: c.state
            for c in session.scalars(
                select(Claim).where(Claim.task_id.is_not(None), Claim.state.in_(OPEN_CLAIM_STATES))
            )
        }
        views = [
            _view(t, claims.get(t.id))
            for t in session.scalars(
                select(Task).where(
                    or_(
                        Task.state.in_([TaskState.PENDING, TaskState.RUNNING]),
                        Task.id.in_(list(claims)),
                    )
                )
            )
        ]
    for view in views:
        try:
            _reconcile(ctx, view, limits)
        except Exception:
            log.exception("reconciling task %s failed", view.id)
    return bool(views)


def prepare_task_launch(ctx: AppContext, task_id: str) -> LaunchRequest | None:
    """The launch request of a pending task, with a fresh bootstrap credential; None if it moved
    on."""
    settings = ctx.settings
    addresses = job_addresses(settings)
    with ctx.db.session() as session:
        task = session.get(Task, task_id)
        if task is None or task.state != TaskState.PENDING or task.handle is not None:
            return None
        claim = task_claim(session, task.id)
        if claim is not None and claim.state != ClaimState.GRANTED:
            return None  # still waiting for its devices
        devices = [int(i) for i in claim.device_ids] if claim is not None else []
        bootstrap = create_bootstrap_token(
            session, task.project, ctx.clock.now(), bootstrap_lifetime(settings), task_id=task.id
        )
        spec = TaskSpec(
            task_id=task.id,
            kind=task.kind,
            project=task.project,
            run_id=task.run_id,
            trainer_url=addresses.trainer_url,
            storage_url=addresses.storage_url,
            storage_s3=addresses.storage_s3,
            params=task.params,
            telemetry=TaskTelemetry(
                collector_endpoint=settings.trainer.telemetry.collector_endpoint,
                traceparent=task.traceparent,
            ),
        )
        return LaunchRequest(
            run_id=task.id,
            # A long-lived task's every launch is a job of its own (backends launch idempotently
            # by task and attempt).
            attempt=task.launch_tries + 1 if task.kind in LONG_LIVED else ATTEMPT,
            pool=task.pool,
            devices=len(devices),
            device_ids=devices,
            job_spec=spec.to_json(),
            # Without a claim the job sees no GPU even on a node that has some; with one, the
            # backend shows it its granted devices only.
            env={
                **job_env(BOOTSTRAP_ENV, bootstrap, task.traceparent),
                **({} if devices else {"CUDA_VISIBLE_DEVICES": ""}),
            },
            entry_module=TASK_JOB,
        )


# --- applying ------------------------------------------------------------------------------------


def _reconcile(ctx: AppContext, view: TaskView, limits: Limits) -> None:
    now = datetime.now(UTC)
    status: JobStatus | None = None
    tail = ""
    if view.handle is not None:
        try:
            status = ctx.backend.status(view.handle)
            if status.state != "running" and not view.reported:
                tail, _ = ctx.backend.logs(view.handle, -16384)
                tail = f"{tail}\n{status.detail}" if status.detail else tail
        except ClusterUnreachable:
            status = None
    decision = decide(view, status, tail, now)
    if decision.release_claim and decision.end is None:
        with ctx.db.session() as session:
            release_task_claim(session, view.id, now)
        return
    if decision.relaunch:
        _relaunch(ctx, view, tail, now)
    elif decision.launch:
        _launch(ctx, view, limits)
    elif decision.stop_job and view.handle is not None:
        try:
            ctx.backend.stop(view.handle, limits.stop_grace_seconds)
        except ClusterUnreachable:
            return
        with ctx.db.session() as session:
            task = session.get(Task, view.id)
            if task is not None:
                task.stop_sent = True
    elif decision.end is not None:
        with ctx.db.session() as session:
            task = lock_task(session, view.id)
            if task is None or task.state != view.state or task.reported:
                return
            move_task(
                session,
                task,
                decision.end,
                failure=decision.failure,
                detail=decision.detail,
                now=now,
            )
            if decision.release_claim:
                release_task_claim(session, task.id, now)


def _relaunch(ctx: AppContext, view: TaskView, tail: str, now: datetime) -> None:
    """Back to PENDING with no job and no address: the next pass launches it again (its claim
    stays granted), and until its new job reports an address requests are told to wait."""
    with ctx.db.session() as session:
        task = lock_task(session, view.id)
        if task is None or task.state != view.state or task.reported or task.requested:
            return
        move_task(session, task, TaskRule.RELAUNCH, now=now)
        task.handle = None
        task.progress = None
        task.stop_sent = False
        task.last_error = _last_lines(tail, 15) or None
    log.warning("the job of task %s ended without a report; launching it again", view.id)


def _launch(ctx: AppContext, view: TaskView, limits: Limits) -> None:
    request = prepare_task_launch(ctx, view.id)
    if request is None:
        return
    try:
        handle = ctx.backend.launch(request)
    except (LaunchRefused, ClusterUnreachable) as exc:
        log.warning("launch of task %s failed: %s", view.id, exc)
        _launch_failed(ctx, view.id, str(exc), limits)
        return
    with ctx.db.session() as session:
        task = lock_task(session, view.id)
        if task is None:
            return
        task.handle = handle
        task.launch_tries += 1
        task.launched_at = datetime.now(UTC)
        if TASK_RULES.can(task.state, TaskRule.LAUNCH):
            move_task(session, task, TaskRule.LAUNCH)
            return
    # Cancelled while it was being launched: its job must not run on.
    try:
        ctx.backend.stop(handle, limits.stop_grace_seconds)
    except ClusterUnreachable:
        log.warning("task %s was cancelled while launching; its job could not be stopped", view.id)


def _launch_failed(ctx: AppContext, task_id: str, error: str, limits: Limits) -> None:
    now = datetime.now(UTC)
    with ctx.db.session() as session:
        task = lock_task(session, task_id)
        if task is None or task.state != TaskState.PENDING:
            return
        task.launch_tries += 1
        task.last_error = error
        if task.launch_tries > limits.start_retries:
            tries = f"{task.launch_tries} {'try' if task.launch_tries == 1 else 'tries'}"
            failure = (
                f"this task's job could not be started on the training cluster ({tries}; the "
                f"last one said: {error})"
            )
            move_task(session, task, TaskRule.FAIL, failure=failure, now=now)
            release_task_claim(session, task.id, now)
            return
        delay = limits.retry_base_seconds * 2 ** (task.launch_tries - 1)
        task.next_try_at = now + timedelta(seconds=delay)


def _view(task: Task, claim_state: str | None = None) -> TaskView:
    return TaskView(
        id=task.id,
        state=task.state,
        requested=task.requested,
        handle=task.handle,
        launch_tries=task.launch_tries,
        next_try_at=task.next_try_at,
        reported=task.reported,
        stop_sent=task.stop_sent,
        claim_state=claim_state,
        kind=task.kind,
    )


def _how(status: JobStatus) -> str:
    if status.state == "missing":
        return "the cluster lost it"
    if status.signal:
        return f"signal {status.signal}"
    return f"exit code {status.exit_code}"


def _last_lines(text: str, n: int) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-n:])
