"""Capacity at one point in time: pools, claims, projects.

For each pool, FREE + GRANTED + OUTSIDE = DECLARED: OUTSIDE counts declared devices the cluster
does not offer the trainer now (not observed). MAX CLAIM is the largest claim the pool accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.api.capacity import Capacity, PoolCapacity, ProjectCapacity
from akka_training.api.capacity import Claim as ClaimRecord
from akka_training.core.errors import NotFound
from akka_training.core.states import OPEN_CLAIM_STATES, ClaimState
from akka_training.deployment.context import AppContext
from akka_training.storage.models import Claim, Project


@dataclass(frozen=True)
class PoolUse:
    name: str
    accelerator: str
    declared: int
    observed: int | None  # None: the cluster did not answer
    granted: int
    queued: int
    max_claim: int
    host_ram_gib: float | None
    claims_by_state: dict[str, int]

    @property
    def outside(self) -> int:
        if self.observed is None:
            return 0
        return max(0, self.declared - self.observed)

    @property
    def free(self) -> int:
        return max(0, self.declared - self.granted - self.outside)


def pool_usage(session: Session, ctx: AppContext) -> list[PoolUse]:
    # What the controller last saw; without a running controller nothing was observed.
    observed = ctx.controller.observed() if ctx.controller is not None else None
    open_claims = list(session.scalars(select(Claim).where(Claim.state.in_(OPEN_CLAIM_STATES))))
    out = []
    for pool in ctx.pools:
        mine = [c for c in open_claims if c.pool == pool.name]
        by_state: dict[str, int] = {ClaimState.QUEUED: 0, ClaimState.GRANTED: 0}
        for c in mine:
            by_state[c.state] = by_state.get(c.state, 0) + 1
        seen = observed.get(pool.name) if observed is not None else None
        out.append(
            PoolUse(
                name=pool.name,
                accelerator=pool.accelerator,
                declared=pool.declared,
                observed=None if observed is None else (seen.devices if seen else 0),
                granted=sum(c.devices for c in mine if c.state == ClaimState.GRANTED),
                queued=by_state[ClaimState.QUEUED],
                max_claim=pool.max_claim,
                host_ram_gib=pool.host_ram_gib,
                claims_by_state=by_state,
            )
        )
    return out


def capacity(
    session: Session, ctx: AppContext, project: str | None, visible: tuple[str, ...] | None = None
) -> Capacity:
    """Pools, open claims and projects. `visible`: the projects the caller may read (None:
    every project, an admin's view); the claims and projects of the others are left out,
    while the pools' figures stay whole (a pool is shared: its free devices are everyone's)."""
    if project and session.get(Project, project) is None:
        raise NotFound(
            f"There is no project {project!r}; `akka training projects list` shows the projects."
        )
    now = datetime.now(UTC)
    pools = [
        PoolCapacity(
            pool=p.name,
            accelerator=p.accelerator,
            free=p.free,
            granted=p.granted,
            outside=p.outside,
            declared=p.declared,
            observed=p.observed,
            queued=p.queued,
            max_claim=p.max_claim,
            host_ram_gib=p.host_ram_gib,
        )
        for p in pool_usage(session, ctx)
    ]
    query = select(Claim).where(Claim.state.in_(OPEN_CLAIM_STATES)).order_by(Claim.id)
    if project:
        query = query.where(Claim.project == project)
    if visible is not None:
        query = query.where(Claim.project.in_(visible))
    claims = [
        ClaimRecord(
            kind=c.kind,
            for_=_claimant(c),
            project=c.project,
            devices=c.devices,
            pool=c.pool,
            state=c.state,
            since=c.granted_at or c.created_at,
            since_seconds=round((now - (c.granted_at or c.created_at)).total_seconds(), 1),
        )
        for c in session.scalars(query)
    ]
    projects = []
    rows = session.scalars(select(Project).order_by(Project.name))
    all_claims = list(session.scalars(select(Claim).where(Claim.state.in_(OPEN_CLAIM_STATES))))
    for p in rows:
        if (project and p.name != project) or (visible is not None and p.name not in visible):
            continue
        projects.append(
            ProjectCapacity(
                project=p.name,
                quota=p.quota,
                held=sum(
                    c.devices
                    for c in all_claims
                    if c.project == p.name and c.state == ClaimState.GRANTED
                ),
                queued=sum(
                    1 for c in all_claims if c.project == p.name and c.state == ClaimState.QUEUED
                ),
            )
        )
    return Capacity(pools=pools, claims=claims, projects=projects)


def _claimant(claim: Claim) -> str:
    claimant = claim.run_id or claim.task_id
    assert claimant is not None  # a claim is made for a run or for a task
    return claimant
