"""Granting claims: FIFO within a pool, within each project's quota.

A claim is granted when its pool has enough free devices and its project stays within its
quota. Within a pool claims are served in submission order: when the oldest claim does not fit
the free devices, younger ones wait behind it (no backfill, so a large claim is never starved). A
claim held back by its own project's quota does not block other projects.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PoolState:
    name: str
    # Device indices the pool can hand out now (observed, not granted), lowest first.
    free_ids: tuple[int, ...]


@dataclass(frozen=True)
class Waiting:
    claim_id: int
    project: str
    pool: str
    devices: int


@dataclass(frozen=True)
class Grant:
    claim_id: int
    device_ids: tuple[int, ...]


def admit(
    pools: dict[str, PoolState],
    queue: list[Waiting],
    quotas: dict[str, int | None],
    held: dict[str, int],
) -> list[Grant]:
    """Grants for the claims in `queue` (oldest first) that can run now."""
    free = {name: list(p.free_ids) for name, p in pools.items()}
    held = dict(held)
    blocked: set[str] = set()
    grants = []
    for claim in queue:
        if claim.pool in blocked or claim.pool not in free:
            continue
        quota = quotas.get(claim.project)
        if quota is not None and held.get(claim.project, 0) + claim.devices > quota:
            continue
        ids = free[claim.pool]
        if len(ids) < claim.devices:
            blocked.add(claim.pool)
            continue
        granted, free[claim.pool] = ids[: claim.devices], ids[claim.devices :]
        held[claim.project] = held.get(claim.project, 0) + claim.devices
        grants.append(Grant(claim.claim_id, tuple(granted)))
    return grants


def free_device_ids(available: int, granted: list[list[int]]) -> tuple[int, ...]:
    """Indices 0..available-1 that no granted claim holds."""
    taken = {i for ids in granted for i in ids}
    return tuple(i for i in range(available) if i not in taken)
