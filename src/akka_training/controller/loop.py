"""The reconcile loop: observe the cluster, admit queued claims, then reconcile every run that
needs work and every open task (`tasks`). It runs in a thread of the service; on Postgres only the replica holding the
advisory lock reconciles (the others still observe the cluster, now and then, so that their
capacity answers stay current).

A pass comes every `interval-seconds`, or at once when a request changes something. While the
loop has nothing to move (every open run trains with a live job or rests paused; no run waits
for devices; no task, no pipeline open) it comes every `steady-seconds` instead: on a node
where the service shares the cores with training, each pass takes them from the step (on two
cores, passes every 0.5 s slowed a bare TRL script beside an idle service by about 4%).

What the cluster offered at the last look is published under a lock as one immutable value:
request threads read it (`observed`) and never call into the controller's own state."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from akka_training.backends.base import ClusterUnreachable, JobStatus, LaunchRefused, ObservedPool
from akka_training.controller import paused, pausing, preparing, queued, terminal, training
from akka_training.controller.apply import (
    apply,
    load_views,
    record_launch_failure,
    record_launched,
    record_stop_sent,
)
from akka_training.controller.launch import prepare_launch
from akka_training.controller.leader import Leadership
from akka_training.controller.sweep import sweep_snapshots
from akka_training.controller.tasks import reconcile_tasks
from akka_training.controller.views import Decision, Limits, Probe, RunView
from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.core.phases import TERMINAL, Phase
from akka_training.core.rules import IllegalTransition
from akka_training.core.states import OPEN_CLAIM_STATES, AttemptState, ClaimRule, ClaimState
from akka_training.deployment.cleanup import clean_crash_leftovers
from akka_training.deployment.context import AppContext
from akka_training.scheduler.admission import PoolState, Waiting, admit, free_device_ids
from akka_training.storage.models import Attempt, Claim, Project, Run
from akka_training.storage.transitions import move_claim
from akka_training.telemetry.catalog import POOL_NAME, RUN_ATTEMPT

log = logging.getLogger(__name__)

# A replica that does not lead looks at the cluster once in this many passes.
FOLLOWER_OBSERVE_PASSES = 10

PHASES: dict[str, Callable[..., Decision]] = {
    Phase.QUEUED: queued.process,
    Phase.PREPARING: preparing.process,
    Phase.TRAINING: training.process,
    Phase.PAUSING: pausing.process,
    Phase.PAUSED: paused.process,
    Phase.COMPLETED: terminal.process,
    Phase.FAILED: terminal.process,
    Phase.CANCELLED: terminal.process,
}


class Controller:
    def __init__(self, ctx: AppContext, clock: Clock = SYSTEM_CLOCK) -> None:
        self.ctx = ctx
        # The pace's time: the waits between passes, the follower's look, the cleanup's.
        self.clock = clock
        cfg = ctx.settings.trainer.controller
        self.interval = cfg.interval_seconds
        self.steady_interval = max(cfg.steady_seconds, cfg.interval_seconds)
        # Whether the last pass found nothing to move (the next one may wait longer).
        self.steady = False
        self.limits = Limits(
            start_retries=cfg.start_retries,
            job_retries=cfg.job_retries,
            retry_base_seconds=cfg.retry_base_seconds,
            stall_seconds=cfg.stall_seconds,
            unreachable_seconds=cfg.unreachable_seconds,
            stop_grace_seconds=ctx.settings.trainer.local.stop_grace_seconds,
        )
        self.leader = Leadership(ctx.db)
        # Written by the controller's thread only; `_published` is what other threads read.
        self._observed: dict[str, ObservedPool] | None = None
        self._observed_at = 0.0
        self._published: dict[str, ObservedPool] | None = None
        self._lock = threading.Lock()
        self._unreachable_since: datetime | None = None
        self._stop = threading.Event()
        self._wake = clock.event()
        self._thread: threading.Thread | None = None
        self._ticks = 0
        self._cleaned_at = clock.monotonic()  # the start-up cleanup just ran
        # Extra work each pass (pipelines); each says whether it has work in progress.
        self.hooks: list[Callable[[], bool]] = []

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        # One look before the first request, so that capacity answers from the start.
        self._observe()
        self._thread = threading.Thread(target=self._run, name="akka-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.leader.release()

    def wake(self) -> None:
        """Run the next pass now (a request changed something)."""
        self._wake.set()

    def observed(self) -> dict[str, ObservedPool] | None:
        """The devices the cluster offered at the last look; None while it does not answer.
        Safe from any thread: it reads the published value and calls nothing."""
        with self._lock:
            return self._published

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # the loop must outlive any one bad pass
                log.exception("controller pass failed")
            self._wake.wait(self.steady_interval if self.steady else self.interval)
            self._wake.clear()

    # --- one pass ------------------------------------------------------------------------------

    def tick(self) -> None:
        self.steady = False
        if not self.leader.hold():
            if self.clock.monotonic() - self._observed_at > FOLLOWER_OBSERVE_PASSES * self.interval:
                self._observe()
            return
        self._ticks += 1
        self._observe()
        waiting = self._admit()
        # Every run's view in one read (a statement per table, not per run), then each run's
        # decision; a decision that acts re-reads its rows in its own transaction (`apply`).
        with self.ctx.db.session() as session:
            views = load_views(session, self._runs_needing_work(session))
        steady = self._observed is not None and not waiting
        for view in views:
            try:
                steady = self._reconcile_view(view) and steady
            except Exception:
                steady = False
                log.exception("reconciling run %s failed", view.id)
        if reconcile_tasks(self.ctx, self.limits):
            steady = False
        for hook in self.hooks:
            if hook():
                steady = False
        self.steady = steady
        if self._ticks % 20 == 0:
            sweep_snapshots(self.ctx)
        storage = self.ctx.settings.trainer.storage
        if self.clock.monotonic() - self._cleaned_at > storage.cleanup_every_seconds:
            # What a killed job or a killed upload left, past its grace, as at start-up.
            self._cleaned_at = self.clock.monotonic()
            clean_crash_leftovers(self.ctx.blobs, self.ctx.db, storage.cleanup_grace_seconds)

    def _observe(self) -> None:
        try:
            self._observed = self.ctx.backend.observe()
            self._unreachable_since = None
        except ClusterUnreachable as exc:
            if self._unreachable_since is None:
                log.warning("the cluster does not answer: %s", exc)
                self._unreachable_since = datetime.now(UTC)
            self._observed = None
        self._observed_at = self.clock.monotonic()
        published = None if self._observed is None else dict(self._observed)
        with self._lock:
            self._published = published

    def _admit(self) -> bool:
        """Grant what fits; whether a claim still waits for devices."""
        observed = self._observed
        if observed is None:
            return False
        with self.ctx.db.session() as session:
            # The open claims' columns only: the pass writes just the claims it grants.
            claims = session.execute(
                select(
                    Claim.id,
                    Claim.run_id,
                    Claim.project,
                    Claim.pool,
                    Claim.devices,
                    Claim.state,
                    Claim.device_ids,
                )
                .where(Claim.state.in_(OPEN_CLAIM_STATES))
                .order_by(Claim.id)
            ).all()
            # A claim larger than any node of its pool is never granted (the QUEUED rule
            # fails its run): the cluster would keep its job waiting for devices no node has.
            queue = [
                Waiting(c.id, c.project, c.pool, c.devices)
                for c in claims
                if c.state == ClaimState.QUEUED
                and not _above_every_node(observed, c.pool, c.devices)
            ]
            if not queue:
                return False
            pools = {}
            for pool in self.ctx.pools:
                seen = observed.get(pool.name)
                available = min(pool.declared, seen.devices if seen else 0)
                granted = [
                    list(c.device_ids)
                    for c in claims
                    if c.pool == pool.name and c.state == ClaimState.GRANTED
                ]
                pools[pool.name] = PoolState(pool.name, free_device_ids(available, granted))
            quotas = {p.name: p.quota for p in session.scalars(select(Project))}
            held: dict[str, int] = {}
            for c in claims:
                if c.state == ClaimState.GRANTED:
                    held[c.project] = held.get(c.project, 0) + c.devices
            now = datetime.now(UTC)
            for grant in admit(pools, queue, quotas, held):
                claim = session.get(Claim, grant.claim_id)
                if claim is None:
                    continue
                try:
                    move_claim(
                        session, claim, ClaimRule.GRANT, device_ids=list(grant.device_ids), now=now
                    )
                except IllegalTransition:
                    continue  # released meanwhile (its run or task was cancelled)
                # An evaluation's claim (no run): its task launches on the tasks' pass below.
                run = session.get(Run, claim.run_id) if claim.run_id is not None else None
                if self.ctx.telemetry is not None and run is not None:
                    with self.ctx.telemetry.span("run.admit", run, **{POOL_NAME: claim.pool}):
                        pass
            return True

    def _runs_needing_work(self, session: Session) -> list[str]:
        open_runs = session.scalars(
            select(Run.id).where(Run.phase.not_in([p.value for p in TERMINAL]))
        ).all()
        # Ended runs whose devices or processes are not yet given back.
        lingering = session.scalars(
            select(Run.id)
            .join(Claim, Claim.run_id == Run.id, isouter=True)
            .join(
                Attempt,
                (Attempt.run_id == Run.id) & (Attempt.number == Run.attempt),
                isouter=True,
            )
            .where(
                Run.phase.in_([p.value for p in TERMINAL]),
                or_(Claim.state.in_(OPEN_CLAIM_STATES), Attempt.state == AttemptState.LAUNCHED),
            )
        ).all()
        return list(dict.fromkeys([*open_runs, *lingering]))

    def reconcile(self, run_id: str) -> None:
        """One run's part of a pass, read afresh."""
        with self.ctx.db.session() as session:
            views = load_views(session, [run_id])
        if views:
            self._reconcile_view(views[0])

    def _reconcile_view(self, view: RunView) -> bool:
        """Decide for one run and act; whether the run is steady (nothing moved, nothing to
        wait for but its job's end)."""
        probe = self._probe(view)
        now = datetime.now(UTC)
        decision = PHASES[view.phase](view, probe, now, self.limits)
        if not decision:
            return _steady(view, probe)
        assert view.attempt is not None or not (decision.launch or decision.stop_job)
        if decision.launch and view.attempt is not None:
            self._launch(view.id, view.attempt.number)
            return False
        if decision.stop_job and view.attempt is not None and view.attempt.handle:
            try:
                self.ctx.backend.stop(view.attempt.handle, self.limits.stop_grace_seconds)
            except ClusterUnreachable:
                return False
            record_stop_sent(self.ctx.db, view.id, view.attempt.number)
        apply(self.ctx.db, view, decision, now)
        return False

    def _probe(self, view: RunView) -> Probe:
        attempt = view.attempt
        if attempt is None or attempt.state != AttemptState.LAUNCHED or not attempt.handle:
            seen = (self._observed or {}).get(view.pool)
            return Probe(
                cluster_unreachable_since=self._unreachable_since,
                largest_node=seen.largest_node if seen is not None else None,
            )
        try:
            status: JobStatus = self.ctx.backend.status(attempt.handle)
        except ClusterUnreachable:
            return Probe(cluster_unreachable_since=self._unreachable_since)
        tail = ""
        if status.state == "exited" and attempt.outcome is None:
            try:
                tail, _ = self.ctx.backend.logs(attempt.handle, -16384)
            except ClusterUnreachable:
                tail = ""
            if status.detail:
                tail = f"{tail}\n{status.detail}"
        return Probe(
            status=status, log_tail=tail, cluster_unreachable_since=self._unreachable_since
        )

    def _launch(self, run_id: str, number: int) -> None:
        with self.ctx.db.session() as session:
            run = session.get(Run, run_id)
            if run is None:
                return
            session.expunge(run)
        if self.ctx.telemetry is not None:
            with self.ctx.telemetry.span("job.launch", run, **{RUN_ATTEMPT: number}) as traceparent:
                self._submit(run_id, number, traceparent)
        else:
            self._submit(run_id, number, None)

    def _submit(self, run_id: str, number: int, traceparent: str | None) -> None:
        request = prepare_launch(self.ctx, run_id, number, traceparent)
        if request is None:
            return
        retries = self.limits.start_retries
        base = self.limits.retry_base_seconds
        try:
            handle: dict[str, Any] = self.ctx.backend.launch(request)
        except LaunchRefused as exc:
            log.warning("launch of %s/%s refused: %s", run_id, number, exc)
            record_launch_failure(self.ctx.db, run_id, number, str(exc), False, retries, base)
            return
        except ClusterUnreachable as exc:
            log.warning("launch of %s/%s: cluster unreachable: %s", run_id, number, exc)
            record_launch_failure(self.ctx.db, run_id, number, str(exc), True, retries, base)
            return
        record_launched(self.ctx.db, run_id, number, handle)


def _steady(view: RunView, probe: Probe) -> bool:
    """A run the controller has nothing to do for until its job ends: it trains with a live
    job and nothing asked of it, or it rests paused with its devices given back."""
    if view.requested is not None:
        return False
    if view.phase == Phase.TRAINING:
        return probe.status is not None and probe.status.state == "running"
    return view.phase == Phase.PAUSED and view.claim_state is None


def _above_every_node(observed: dict[str, ObservedPool], pool: str, devices: int) -> bool:
    seen = observed.get(pool)
    largest = seen.largest_node if seen is not None else None
    return bool(largest) and devices > (largest or 0)
